"""Argus configuration: one YAML file (seed 002 §3.3 keys) plus environment overrides.

The file keeps the seed's layout: Ray settings at the top level (``address``,
``shared_root``, ``entrypoint_*``, ``runtime_env``, ``user_code_path``) and the service's
own settings under ``v2:`` (``api``, ``auth``, ``sqlite``, ``scheduler``). Every leaf can
be overridden by an environment variable ``ARGUS_<PATH>`` with ``__`` between levels, e.g.
``ARGUS_V2__SCHEDULER__MAX_RUNNING_TASKS=4`` or ``ARGUS_SHARED_ROOT=/private``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, Mapping

import msgspec
import yaml

from argus import layout
from argus.config_teams import TeamQuotaSeed, TeamSeed
from argus.config_seed import drop_seed_keys, seed_key_of_variable
from argus.config_data import MIN_OUTPUT_BUDGET, FilesConfig, HubConfig, OutputConfig, RetentionConfig, SftpConfig

__all__ = [
    "ApiConfig",
    "ArgusConfig",
    "AuthConfig",
    "ChurnGuard",
    "ConfigError",
    "SandboxConfig",
    "FairShareConfig",
    "HubConfig",
    "RetentionConfig",
    "MIN_OUTPUT_BUDGET",
    "OutputConfig",
    "FilesConfig",
    "TeamQuotaSeed",
    "TeamSeed",
    "SchedulerConfig",
    "SftpConfig",
    "ServiceConfig",
    "SqliteConfig",
    "TaskSpecConfig",
    "load_config",
]

ENV_PREFIX = "ARGUS_"


class ConfigError(ValueError):
    """The configuration file or an override is invalid; the message says which key."""


class ApiConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = 1_048_576
    max_upload_bytes: int = 2 * 1024**3
    # Per user: this many submissions at once, then this many per second (429 beyond);
    # 0 turns the cap off (argus.api.ratelimit).
    submit_burst: int = 200
    submit_rate_per_s: float = 20.0
    # How many of a user's tasks may wait at once when an admin set no cap of their own
    # (``argus users set ID --max-queued N``); beyond it a submission is a 409. 0: no cap.
    default_max_queued: int = 200
    # Event and log streams (SSE) open at once per token and per user; beyond, a 429.
    # 0 turns a cap off (argus.api.streamcap).
    max_streams_per_token: int = 32
    max_streams_per_user: int = 64


class AuthConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # Name of the environment variable that holds the bootstrap admin token.
    token_env: str = "ARGUS_ADMIN_TOKEN"
    admin_user: str = "admin"
    session_ttl_s: int = 12 * 3600
    # A token's last use is recorded (a TokenUsed event) at most this often per token;
    # 0: not recorded.
    token_use_resolution_s: float = 3600.0


class SqliteConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # Local disk only: WAL does not work on network filesystems (docs/design.md §3).
    db_path: str = "argus.sqlite3"
    # FULL: a committed append survives power loss. NORMAL: survives a process crash only.
    synchronous: str = "FULL"
    # A log found damaged at start (argus.store.integrity): refuse to start, or serve reads
    # only (no writes, no reactor) until it is repaired (docs/operations.md, "A damaged log").
    on_damage: Literal["refuse", "serve_reads"] = "refuse"


# Query keys that carry a secret in libpq's URI form (``?password=…``, ``?sslpassword=…``).
_SECRET_QUERY_KEYS = frozenset({"password", "sslpassword"})


def redact_url(url: str) -> str:
    """``url`` with every password replaced by ``***`` (for anything shown, logged or
    written to a file others may read): ``user:pw@`` and libpq's ``?password=`` form."""
    from urllib.parse import parse_qsl, urlencode

    scheme, sep, rest = url.partition("://")
    rest, qmark, query = rest.partition("?")
    credentials, at, host = rest.rpartition("@")
    if at and ":" in credentials:
        rest = f"{credentials.split(':', 1)[0]}:***@{host}"
    if qmark:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(key.lower() in _SECRET_QUERY_KEYS for key, _ in pairs):
            query = urlencode([(k, "***" if k.lower() in _SECRET_QUERY_KEYS else v) for k, v in pairs],
                              safe="*/:")
    return f"{scheme}{sep}{rest}{qmark}{query}"


def hide_secrets(text: str, url: str) -> str:
    """``text`` (a driver's error, say) with every password of ``url`` and the value of
    ``PGPASSWORD`` (libpq reads it when the URL has none) replaced by ``***``."""
    from urllib.parse import parse_qsl, unquote

    secrets = [os.environ.get("PGPASSWORD", "")]
    rest = url.partition("://")[2]
    rest, _, query = rest.partition("?")
    credentials = rest.rpartition("@")[0]
    if ":" in credentials:
        secrets.append(unquote(credentials.split(":", 1)[1]))
    secrets += [v for k, v in parse_qsl(query) if k.lower() in _SECRET_QUERY_KEYS]
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


class PostgresConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The event log shared by several hosts (docs/operations.md; ``argus.store.mirror``)."""

    # postgresql://user:password@host:5432/argus. Empty (the default): the SQLite file is
    # the log. Set: the log is PostgreSQL's, and v2.sqlite.db_path is this host's copy of it.
    url: str = ""


class ChurnGuard(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """One user's guards against preemption churn (``v2.scheduler.user_guards``), each
    replacing the global setting of the same name where set (None: the global one)."""

    preempt_min_run_s: float | None = None
    evict_after_s: float | None = None
    max_preemptions: int | None = None


class FairShareConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``fairshare`` policy's knobs (docs/scheduling.md)."""

    # GPU-seconds count half as much after this long (Slurm's PriorityDecayHalfLife).
    half_life_s: float = 7 * 24 * 3600.0
    # Each user's share of the cluster, relative to the others' (a user not listed: 1).
    shares: dict[str, float] = {}
    # GPUs guaranteed to a user: their tasks within it come first, and preemptible tasks of
    # users beyond their own quota are stopped for them. Idle GPUs may be borrowed by anyone.
    quotas: dict[str, float] = {}
    # Teams recorded in the log at start, once each (docs/teams.md): their share, members
    # and quotas per GPU model. Afterwards `argus teams` changes them; the file no longer does.
    teams: dict[str, TeamSeed] = {}
    # An age term: a task that has waited this long goes before every user's share, oldest
    # first (after the rooms being made), so the first of them that does not fit gets the
    # reservation: fair share alone let a heavy user's big gang wait for days while small
    # tasks backfilled around it (docs/evaluation/2026-11-26-fairshare-age-term.md, 4 seeds). 0: off.
    max_wait_s: float = 12 * 3600.0


class StallConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """When a running attempt that reports its steps counts as stalled (docs/runs.md): no
    new step for ``step_multiple`` times its own median step time, at least ``floor_s``
    (``default_s`` > 0: that instead; a spec's ``stall_timeout``: that, at most
    ``max_s``); before its first step, ``before_first_step_s`` (models load slowly).
    A stalled attempt is stopped and resumed from its last checkpoint (STALLED, a
    transient kind), after its driver dumped its stacks, or ``stacks_wait_s`` passed
    without them (0: no stacks). ``enabled`` false: never."""

    enabled: bool = True
    step_multiple: float = 10.0
    floor_s: float = 900.0
    default_s: float = 0.0
    max_s: float = 86_400.0
    before_first_step_s: float = 3600.0
    stacks_wait_s: float = 30.0


class SchedulerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    retry_interval_s: float = 60.0
    retry_on_max: int = 2  # attempts retried per task because its spec's retry_on named their end
    retry_backoff: float = 2.0
    retry_max_interval_s: float = 600.0
    # Attempts that fail for lack of resources are retried without counting against a
    # task's max_attempts, until it has waited this long since submission; then it FAILS
    # with the reason. 0: retry for ever.
    max_pending_s: float = 24 * 3600.0
    # Transient faults (NCCL timeouts, CUDA and host OOM: FailureKind.is_transient) resume
    # from the last checkpoint up to this many times per task; the same kind at the same
    # step twice ends the task FAILED at once (it is a bug, not bad luck). 0: never.
    transient_retries: int = 3
    # Tasks running at once on the cluster (each one Ray job): more wait, with a message
    # naming this setting. 32: through argus up on a 2-core host 43 ran at once without an
    # error (docs/evaluation/2026-12-03-concurrency.md); the head's own services grew ~4-7 MB
    # a task (each job's supervisor and driver, ~160 MB, run on the workers), but Ray's job
    # list slowed to p95 ~0.9 s and Ray started jobs at ~0.2 a second there, and Ray
    # reports Jobs API failures past ~30 running jobs on some versions. Raise it on a
    # larger head (docs/operations.md, "Tasks at once").
    max_running_tasks: int = 32
    max_running_per_user: int = 0  # 0: no per-user limit
    # Let tasks behind a head that does not fit start if they fit (better use of GPUs;
    # the head may wait longer). Strict FIFO when false.
    backfill: bool = False
    # The admission policy (argus.scheduler.POLICIES; a test keeps the two lists equal):
    # the order waiting tasks are considered in, and shown in.
    policy: Literal["fifo", "fifo-backfill", "priority", "reserve-backfill", "fairshare"] = "reserve-backfill"
    # Under priority and fairshare, stop tasks submitted with ``preemptible: true`` to admit
    # a task that outranks them. They are requeued at their place and resume from their
    # checkpoints; their attempt is not counted.
    preemption: bool = True
    # From the stop (SIGTERM) to the kill: ``argus up`` gives it to Ray's job manager
    # (RAY_JOB_STOP_WAIT_TIME_S); on a cluster of your own, set that variable on the head.
    preempt_grace_s: float = 30.0
    # What a preemption costs (issue 36): a task is stopped to make room only once it has
    # run this long since Ray was seen running it (its trainer has started: stopping it
    # sooner throws its start away), and at most this many times (then it runs to its end;
    # 0: no cap). Victims: the least work lost first (lowest priority, then the least work
    # since the last checkpoint seen, or since the start). Both stay at what they were before they could be set: on the
    # openb trace each helps one policy and breaks the other
    # (docs/evaluation/2026-11-26-preemption-cost.md).
    preempt_min_run_s: float = 15.0
    max_preemptions: int = 0
    # A waiting task stops (or moves) no running task before it has waited this long; its
    # wait message says from when it may (0: at once).
    evict_after_s: float = 0.0
    # Per user, any of preempt_min_run_s, evict_after_s and max_preemptions in place of the
    # global value: {alice: {preempt_min_run_s: 1800}} (argus.scheduler.guards).
    user_guards: dict[str, ChurnGuard] = {}
    # Under a policy that reserves, the first waiting task of each set of GPU models that
    # does not fit gets a reservation too, not only the head (argus.scheduler.per_model):
    # with one reservation, tasks of any model kept taking a scarce model's nodes.
    reserve_per_model: bool = True
    # A task that accepts any GPU model is placed on the nodes of the minor models (fewer
    # nodes than an even split between the models) last, as Slurm's node weights do.
    minor_models_last: bool = True
    # Moving to make room (with ``preemption``): a waiting task that would wait at least
    # this long for its gang (its reservation's estimate) gets preemptible tasks stopped
    # where it would fit, whatever their priority, when each fits elsewhere now and more
    # kinds of node can hold it than can hold the waiting task (a rare node is freed for
    # the work only it holds); they start again at once, elsewhere. 0: never. On the openb
    # trace 1 h was better than none for priority on all of seeds 0-7 (fair share: 7 of 8),
    # and moving without a wait bound collapsed seed 1 (docs/evaluation/2026-11-27-moving-to-make-room.md).
    move_after_s: float = 3600.0
    # How often the reactor looks for each running attempt's last checkpoint (verl's
    # latest_checkpointed_iteration.txt under its job dir; argus.reactor.checkpoints), for
    # the victims' order and the task's page (0: never).
    checkpoint_check_s: float = 30.0
    # How often the reactor reads each running attempt's progress report (its driver's:
    # argus.rayjobs.reports), and the least time between two AttemptProgressed events of
    # one attempt (the step is recorded when it moved; 0 for either: never).
    progress_check_s: float = 5.0
    progress_record_s: float = 10.0
    # The driver's exit report ends an attempt without waiting for the next look at Ray:
    # the reactor looks for new ones this often (one stat of one folder, however many run).
    exit_watch_s: float = 0.05
    stall: StallConfig = msgspec.field(default_factory=StallConfig)
    fairshare: FairShareConfig = msgspec.field(default_factory=FairShareConfig)
    lease_ttl_s: float = 15.0
    poll_interval_s: float = 1.0
    # A worker node that joined (or rejoined, or came back with the cluster after an outage)
    # admits nothing until it has been observed this long without a break: a raylet that
    # is still registering must not be handed a gang (argus.scheduler.ledger).
    node_settle_s: float = 2.0
    # Where a gang goes among the nodes that fit it: "bestfit" (fewest free GPUs left), or
    # "fragmentation" (argus.scheduler.fragmentation; it lost to best-fit on the trace:
    # for ``argus sim`` comparisons).
    placement: Literal["bestfit", "fragmentation"] = "bestfit"
    # Wait reasons recorded per turn (one transaction, after the turn's admissions), front
    # of the queue first; the rest follow in the next turns (which come at once). Each is
    # a task event with its projections (~30 µs of CPU): 10,000 arrivals get every reason
    # in their first turn (bench_turn), and a bigger burst is spread over turns.
    deferrals_per_turn: int = 10_000
    # A task's expected run time when it has no time_limit and its user has no finished run
    # of the same workload and shape (reservations and ETAs are computed from it).
    default_runtime_s: float = 3600.0
    # A running attempt whose placement groups stay PENDING this long is stopped and
    # retried as INSUFFICIENT_RESOURCES: verl >= 0.6 waits for them for ever when the
    # gang fits in total but not as Ray placed it (0: never). Checked every
    # placement_check_s, with one listing of Ray's placement groups.
    placement_timeout_s: float = 300.0
    placement_check_s: float = 5.0
    # The worker nodes a gang is judged against at submit while none has been observed
    # (count × GPUs × CPUs each); 0 nodes: accept any gang until the cluster is seen.
    assumed_nodes: int = 0
    assumed_node_gpus: float = 0.0
    assumed_node_cpus: float = 0.0
    # Their GPU model; "": not known, and a spec's gpu_type is not judged until nodes are seen.
    assumed_node_gpu_type: str = ""


EXAMPLES_VARIABLE = "ARGUS_V2__TASKSPEC__ALLOW_EXAMPLES"


def _examples_default() -> bool:
    """Off, unless the environment turns it on (as load_config would read it): the tests
    set it once for every config they build, in their process and in the stacks they start."""
    return os.environ.get(EXAMPLES_VARIABLE, "").strip().lower() in ("1", "true", "yes")


class TaskSpecConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # Modules an advanced command may run (a prefix ending in "." allows its submodules):
    # verl's trainers, no other program (docs/taskspec.md, "Why one command").
    allowed_modules: list[str] = msgspec.field(default_factory=lambda: ["verl.trainer."])
    # Also argus.examples.* (the CPU-only example trainer): `argus up` and the tests turn
    # it on; a production service runs only what allowed_modules lists.
    allow_examples: bool = msgspec.field(default_factory=_examples_default)
    max_document_bytes: int = 65_536
    max_command_bytes: int = 16_384
    # The interpreter that runs a task's ``python3`` and Argus's job driver on the workers.
    # "python3" is whatever the workers' environment finds; ``argus up`` sets the
    # interpreter Argus itself runs in. Shown in every task's expanded command.
    python: str = "python3"
    # The failure kinds a spec's retry_on may name (docs/taskspec.md, Retries): by default the
    # ones whose cause Argus cannot tell, never retried by its own rule.
    retry_on_kinds: list[str] = msgspec.field(default_factory=lambda: ["RUNTIME_ERROR", "UNKNOWN"])

    def modules(self) -> list[str]:
        """The modules a command may run: ``allowed_modules``, and the examples when allowed."""
        return [*self.allowed_modules, *(["argus.examples."] if self.allow_examples else [])]


class SandboxConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Confinement of each job's command on the workers (docs/security.md).

    ``auto`` (the default): Landlock where the worker's kernel has it, else not confined
    (said in one line at start and in the job's log); ``landlock``: Landlock or the job does
    not run. Either way the command and everything it starts may read the system and the
    interpreter, read the shared ``datasets``, ``hf`` and ``common`` folders, and write only
    in the user's home (plus ``writable``); other homes, the control plane's data, ``/tmp``
    and ``hidden`` are out of reach.

    ``bwrap``: the command runs under bubblewrap: the machine read-only, a private ``/tmp``,
    of the shared root only the user's home and the shared read-only folders.

    Ray workers the job asks Ray for are the raylet's children: the node pool confines them
    (``argus.confine.worker``), not this setting."""

    mode: Literal["auto", "landlock", "bwrap", "none"] = "auto"
    # The bubblewrap binary on the workers (Debian: apt-get install bubblewrap).
    bwrap: str = "bwrap"
    # More paths the command may read / write, where the layout above leaves them out.
    read_only: list[str] = msgspec.field(default_factory=list)
    writable: list[str] = msgspec.field(default_factory=list)
    # Landlock: never readable, even inside a path the interpreter needs (a checkout of
    # Argus holding its data folder). The event log's folder is always hidden; add the
    # folders of the config file and tokens when they are elsewhere.
    hidden: list[str] = msgspec.field(default_factory=list)


class ServiceConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``v2:`` section: settings of the Argus service itself."""

    api: ApiConfig = msgspec.field(default_factory=ApiConfig)
    auth: AuthConfig = msgspec.field(default_factory=AuthConfig)
    sqlite: SqliteConfig = msgspec.field(default_factory=SqliteConfig)
    postgres: PostgresConfig = msgspec.field(default_factory=PostgresConfig)
    scheduler: SchedulerConfig = msgspec.field(default_factory=SchedulerConfig)
    taskspec: TaskSpecConfig = msgspec.field(default_factory=TaskSpecConfig)
    sandbox: SandboxConfig = msgspec.field(default_factory=SandboxConfig)
    hub: HubConfig = msgspec.field(default_factory=HubConfig)
    retention: RetentionConfig = msgspec.field(default_factory=RetentionConfig)
    output: OutputConfig = msgspec.field(default_factory=OutputConfig)
    sftp: SftpConfig = msgspec.field(default_factory=SftpConfig)
    files: FilesConfig = msgspec.field(default_factory=FilesConfig)


class ArgusConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The whole configuration. Top-level keys are the seed's RayConfig keys."""

    # Ray job server address (http://head:8265) or "auto" to read the discovery file.
    address: str = "auto"
    # GCS address (head:6379) for capacity reads; empty: derived from the discovery file.
    gcs_address: str = ""
    cluster_name: str = "argus-ray"
    shared_root: str = "/private"
    entrypoint_num_cpus: float = 1.0
    entrypoint_resources: dict[str, float] = msgspec.field(
        default_factory=lambda: {"worker_node": 1.0}
    )
    runtime_env: dict[str, Any] = msgspec.field(default_factory=dict)
    # Where the verl code lives on workers; added to the driver's PYTHONPATH.
    user_code_path: str = ""
    v2: ServiceConfig = msgspec.field(default_factory=ServiceConfig)

    @property
    def shared_path(self) -> Path:
        return Path(self.shared_root)

    def discovery_file(self) -> Path:
        return Path(layout.discovery_file(self.shared_root, self.cluster_name))


def _apply_env(doc: dict[str, Any], environ: Mapping[str, str], said: list[str]) -> dict[str, Any]:
    """Overlay ``ARGUS_A__B__C=value`` onto ``doc['a']['b']['c']``; values are parsed as YAML
    scalars so that numbers and booleans keep their type. A variable under a section of
    the configuration (``ARGUS_V2__…``) must name a real key: a typo is refused, not
    ignored (a key of the seed platform that Argus replaced: a warning in ``said``). Other
    ``ARGUS_*`` variables (``ARGUS_ROLE``, the node pool's) are not ours."""
    for key, raw in environ.items():
        if not key.startswith(ENV_PREFIX) or key == "ARGUS_CONFIG":
            continue
        path = [part.lower() for part in key[len(ENV_PREFIX):].split("__") if part]
        if not path:
            continue
        seed = seed_key_of_variable(key, path)
        if seed is not None:  # the seed platform's key: ignored, with a warning
            said.append(seed)
            continue
        if not _is_config_path(path):
            if len(path) > 1 and _is_section(path[0]):
                raise ConfigError(f"{key} names no configuration key ({'.'.join(path)}); "
                                  "`argus config show` lists them")
            continue
        node = doc
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        try:
            node[path[-1]] = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            node[path[-1]] = raw
    return doc


def _is_section(name: str) -> bool:
    """A top-level key that holds a section (``v2``), not a value."""
    field = {f.name: f for f in msgspec.structs.fields(ArgusConfig)}.get(name)
    return field is not None and isinstance(field.type, type) and issubclass(field.type, msgspec.Struct)


def _is_config_path(path: list[str]) -> bool:
    """Only variables naming a real config field are overrides (ARGUS_ROLE is not)."""
    struct: Any = ArgusConfig
    for part in path:
        fields = {f.name: f for f in msgspec.structs.fields(struct)}
        if part not in fields:
            return False
        ftype = fields[part].type
        struct = ftype if isinstance(ftype, type) and issubclass(ftype, msgspec.Struct) else None
        if struct is None:
            return part == path[-1]
    return True


def load_config(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None,
    warnings: list[str] | None = None,
) -> ArgusConfig:
    """Read the YAML file (``path``, else ``$ARGUS_CONFIG``, else defaults), then overlay
    environment overrides. Raises ConfigError naming the offending key. A key of the seed
    platform that Argus replaced (``argus.config_seed``) is ignored with a warning, logged
    and appended to ``warnings``."""
    said = warnings if warnings is not None else []
    environ = os.environ if environ is None else environ
    path = path or environ.get("ARGUS_CONFIG")
    doc: dict[str, Any] = {}
    if path:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping at the top level")
        doc = loaded or {}
        said.extend(drop_seed_keys(doc, str(path)))
    doc = _apply_env(doc, environ, said)
    try:
        return msgspec.convert(doc, ArgusConfig, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from exc
