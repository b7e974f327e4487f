"""The configuration of what Argus keeps for its users (``v2.files``, ``v2.output``,
``v2.retention``, ``v2.hub``, ``v2.sftp``): their files and transfers, their jobs' output
and its retention, the shared model cache, the SFTP door. Re-exported by ``argus.config``,
where the rest of the configuration and its loading live."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["MIN_OUTPUT_BUDGET", "FilesConfig", "HubConfig", "OutputConfig", "RetentionConfig", "SftpConfig"]


class HubConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The shared Hugging Face cache (docs/data.md): ``<shared>/hf``, ``common/hf`` to users,
    in the hub's cache layout (``models--Org--Name/``), is every job's ``HF_HUB_CACHE``,
    read-only to jobs; admins fill it (``argus files put common/hf/...``)."""

    # The cluster cannot reach the hub: jobs also get HF_HUB_OFFLINE=1 (and
    # TRANSFORMERS_OFFLINE, HF_DATASETS_OFFLINE), and a TaskSpec naming a hub id that is
    # not in the shared cache is refused at submit (a 400 that says so) instead of warned.
    offline: bool = False
    # false: Argus sets none of the HF_* variables (the workers' own environment decides).
    shared_cache: bool = True


class RetentionConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What the reactor deletes of finished tasks' outputs under ``users/*/jobs/``, each
    deletion an ``AttemptOutputsRemoved`` event (docs/data.md, "Retention"). A task
    that is not finished (running, waiting, or waiting to resume) is never touched."""

    # Delete a finished task's attempt folders this many days after the attempt ended
    # (0: never).
    max_age_days: float = 0.0
    # Keep only this many of a finished task's checkpoints (verl's ``global_step_<N>``
    # folders, the highest steps, across its attempts); delete the others (0: keep all).
    keep_checkpoints: int = 0
    # How often the reactor applies the policy (seconds), and at most how many entries
    # (files, links, folders) one pass deletes: the rest waits for the next pass.
    interval_s: float = 3600.0
    max_entries_per_pass: int = 1_000_000


class OutputConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How much of each attempt's output is kept (docs/runs.md, "An attempt's output").

    Past ``budget_bytes`` the job's driver keeps the first and the last half of it in
    ``driver.log`` and says how much it dropped (in the log, and in an
    ``AttemptOutputTruncated`` event); a spec's ``output_budget`` may ask for another budget,
    up to ``max_budget_bytes``. Ray's job log gets ``ray_copy_bytes`` of it at most, and each
    Ray worker of the job keeps at most the budget of what it prints (Ray's log rotation)."""

    budget_bytes: int = msgspec.field(default=1 << 30)
    max_budget_bytes: int = msgspec.field(default=16 << 30)
    # truncate: keep the head and tail, the run goes on; stop: the command is stopped too
    # (its attempt fails as a user error, not retried).
    on_exceed: Literal["truncate", "stop"] = "truncate"
    ray_copy_bytes: int = msgspec.field(default=1 << 20)

    def __post_init__(self) -> None:
        if self.budget_bytes < MIN_OUTPUT_BUDGET or self.max_budget_bytes < self.budget_bytes:
            raise ValueError(f"v2.output: budget_bytes must be at least {MIN_OUTPUT_BUDGET} and at most "
                             "max_budget_bytes")
        if self.ray_copy_bytes < 0:
            raise ValueError("v2.output.ray_copy_bytes must be 0 or more")


# The least budget: a run's first lines and its last traceback must fit.
MIN_OUTPUT_BUDGET = 64 * 1024


class SftpConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The SFTP door (argus.sftp; docs/operations.md, "SFTP"): the API process serves SFTP
    and scp to the same users, keys registered through the API, the same path rules."""

    # 0: off for `argus serve`; `argus up` serves it on --sftp-port (default 2222) instead.
    port: int = 0
    host: str = ""  # "": v2.api.host
    # The server's private host key; "": sftp_host_ed25519_key beside the event log's file,
    # made (0600) on first start. A key readable by others is refused.
    host_key: str = ""
    # Also accept the user's API token as the SSH password (for clients without keys).
    password_auth: bool = False
    # How often open sessions are checked against revoked keys and disabled users.
    recheck_s: float = 0.5
    max_sessions_per_user: int = 16
    # The ciphers offered, in asyncssh's names. No ChaCha20: OpenSSH's client prefers it,
    # and asyncssh spends ~1.5x the server CPU on it that it spends on AES (AES-GCM the
    # least; docs/evaluation/2026-12-03-sftp.md). Every SFTP client (OpenSSH, WinSCP,
    # FileZilla) speaks AES-CTR or AES-GCM. []: asyncssh's defaults.
    ciphers: list[str] = msgspec.field(default_factory=lambda: [
        "aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "aes128-ctr", "aes192-ctr", "aes256-ctr"])


class FilesConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``v2.files``: per-user storage and resumable (tus) uploads (docs/api.md "Files")."""

    # Bytes a user may hold in datasets/, models/ and code/ plus uploads in progress;
    # 0: no limit. ``quotas`` overrides it per user id.
    quota_bytes: int = 100 * 1024**3
    quotas: dict[str, int] = msgspec.field(default_factory=dict)
    # An unfinished upload is removed this long after its last chunk arrived.
    upload_expiry_s: int = 24 * 3600
    # How often expired uploads are swept; 0: never (tests sweep by hand).
    sweep_interval_s: float = 600.0
    # Uploads in progress at once per user (each reserves its declared length).
    max_staged_uploads: int = 64
    # One PATCH body at most (streamed to disk: bounds a retry, not memory).
    max_chunk_bytes: int = 1024**3
