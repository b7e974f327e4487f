"""The event log as server-sent events, through one shared tailer.

:class:`Broadcaster` runs the process's only ``store.subscribe`` loop. Each event is
encoded once, kept in a ring of recent events, and put on the queue of every connected
client allowed to see it (owner = the client's user; an admin sees all). Ring and queue
entries are ``(position, owner, frame bytes, the frame its owner gets)`` tuples (an owner
who is not an admin never reads another user's task ids or name: ``argus.api.redact``, so
their frame is rewritten once, when it names any): the garbage collector stops
tracking those, so a full ring (tens of thousands of events) does not make every full
collection walk it (that walk was a tens-of-milliseconds pause under load). A new client
registers its queue first, then catches up (from the ring, or from the log when it is
further back), then drains its queue, skipping positions it already sent — so a resume
with ``Last-Event-ID`` yields exactly the missed events, once each, in order.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from typing import TYPE_CHECKING, Annotated, Any, AsyncIterator, Callable

from dataclasses import dataclass

import msgspec
from litestar import Request, get
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.params import Parameter
from litestar.response import ServerSentEvent, ServerSentEventMessage

from argus.api.openapi import EVENTS, errors, sse_events
from argus.api.redact import Redactor
from argus.api.streamcap import held
from argus.events import Recorded
from argus.service import Principal
from argus.store.gather import stop_task
from projections.reads import ProjectionReads

if TYPE_CHECKING:
    from argus.store import EventStore

__all__ = ["Broadcaster", "events_stream"]

log = logging.getLogger(__name__)
_encode = msgspec.json.Encoder().encode
_Item = tuple[int, "str | None", bytes, bytes]  # position, owner, the SSE frame, as its owner reads it


@dataclass
class _Encoded(ServerSentEventMessage):
    """An SSE frame encoded once by the tailer, sent as is (made per send: short-lived)."""

    raw: bytes = b""

    def encode(self) -> bytes:
        return self.raw


_HEARTBEAT = _Encoded(raw=b": heartbeat\r\n\r\n")


def _data(rec: Recorded) -> bytes:
    return _encode({
        "position": rec.position, "stream": rec.stream, "type": rec.type,
        "recorded_at": rec.recorded_at, "actor": rec.meta.actor, "owner": rec.owner,
        "data": rec.event,
    })


class _Client:
    __slots__ = ("who", "queue", "overflow")

    def __init__(self, who: Principal, size: int) -> None:
        self.who = who
        self.queue: asyncio.Queue[_Item] = asyncio.Queue(size)
        self.overflow = False

    def sees(self, owner: str | None) -> bool:
        return self.who.is_admin or owner == self.who.user_id


class Broadcaster:
    """One tailer of the log fanning out to every SSE client of this process."""

    def __init__(self, store: "EventStore", *, ring: int = 20_000, queue_size: int = 20_000,
                 heartbeat_s: float = 15.0, on_event: Callable[[Recorded], None] | None = None) -> None:
        self.store = store
        self.reads = ProjectionReads(store)
        self.ring: collections.deque[_Item] = collections.deque(maxlen=ring)
        self.clients: set[_Client] = set()
        self.queue_size = queue_size
        self.heartbeat_s = heartbeat_s
        self.position = 0
        self._on_event = on_event
        self._task: asyncio.Task[None] | None = None
        self.closing = False
        # Access taken away since this process started: streams of these end at once.
        self.revoked_tokens: set[str] = set()
        self.disabled_users: set[str] = set()
        self.users: set[str] = set()  # known users: what an owner's frame must not name
        self._redactors: dict[str, Redactor] = {}  # by owner, until a user is created

    def cut_off(self, who: Principal) -> bool:
        """Whether ``who`` lost access (token revoked, user disabled) while connected."""
        return who.token_id in self.revoked_tokens or who.user_id in self.disabled_users

    def _access_changed(self, rec: Recorded) -> None:
        """End the open streams of a principal whose token was revoked or whose user was
        disabled: the browser reconnects and is refused (401/403)."""
        event: Any = rec.event
        if rec.type == "TokenRevoked":
            self.revoked_tokens.add(event.token_id)
        elif rec.type == "UserDisabled":
            self.disabled_users.add(event.user_id)
        elif rec.type == "UserEnabled":
            self.disabled_users.discard(event.user_id)
            return
        else:
            return
        for client in list(self.clients):
            if self.cut_off(client.who):
                _end(client)

    def _owners_frame(self, rec: Recorded, raw: bytes) -> bytes:
        """``raw`` as the event's owner may read it (no other user's task ids or name);
        ``raw`` itself when it names none, or has no owner (only admins see those)."""
        if rec.owner is None:
            return raw
        hide = self._redactors.get(rec.owner)
        if hide is None:
            hide = self._redactors[rec.owner] = Redactor(rec.owner, self.users)
        if not hide.may_name_others(raw.decode()):
            return raw
        data = msgspec.json.decode(_data(rec))
        seen = hide.value(data)
        return raw if seen == data else _frame(rec, _encode(seen))

    def close_streams(self) -> None:
        """End every open stream now (the server is shutting down): each ends cleanly, so
        the server need not cancel them mid-response. Clients reconnect with Last-Event-ID."""
        self.closing = True
        for client in list(self.clients):
            _end(client)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        self.position = await self.store.head_position()
        self.users = {u.user_id for u in await self.reads.users()}
        self._task = asyncio.get_running_loop().create_task(self._tail(), name="sse-tailer")

    async def stop(self) -> None:
        await stop_task(self._task)

    async def _tail(self) -> None:
        while True:
            try:
                async for rec in self.store.subscribe(after=self.position):
                    self.position = rec.position
                    if rec.type == "UserCreated":
                        self.users.add(rec.event.user_id)  # type: ignore[attr-defined]
                        self._redactors = {}
                    raw = _frame(rec)
                    item = (rec.position, rec.owner, raw, self._owners_frame(rec, raw))
                    self.ring.append(item)
                    if self._on_event is not None:
                        self._on_event(rec)
                    if rec.type in _ACCESS_EVENTS:
                        self._access_changed(rec)
                    for client in list(self.clients):
                        if client.sees(rec.owner) and not client.overflow:
                            try:
                                client.queue.put_nowait(item)
                            except asyncio.QueueFull:
                                client.overflow = True  # it reconnects with Last-Event-ID
            except asyncio.CancelledError:
                raise
            except Exception:  # a read error must not end the stream for everyone
                log.exception("event tailer failed; restarting in 1s")
                await asyncio.sleep(1.0)

    async def stream(self, who: Principal, after: int) -> AsyncIterator[ServerSentEventMessage]:
        """Events after ``after`` that ``who`` may see, then live ones, with heartbeats."""
        client = _Client(who, self.queue_size)
        if self.closing:
            return
        self.clients.add(client)
        try:
            last = after
            owner = None if who.is_admin else who.user_id
            while True:  # catch up from the log until the ring covers the rest
                ring_first = self.ring[0][0] if self.ring else self.position + 1
                if last + 1 >= ring_first or last >= self.position:
                    break
                until = ring_first - 1
                recs = await self.store.read(last, 500, owner=owner, until=until)
                for rec in recs:
                    raw = _frame(rec)
                    yield _Encoded(raw=raw if who.is_admin else self._owners_frame(rec, raw))
                    last = rec.position
                if len(recs) < 500:
                    last = max(last, until)
            for position, rec_owner, raw, owners in list(self.ring):  # snapshot: no await in between
                if position > last and client.sees(rec_owner):
                    yield _Encoded(raw=raw if who.is_admin else owners)
                    last = position
            while not client.overflow:
                try:
                    if client.queue.empty():
                        async with asyncio.timeout(self.heartbeat_s):  # no task per wait
                            position, _owner, raw, owners = await client.queue.get()
                    else:
                        position, _owner, raw, owners = client.queue.get_nowait()
                except TimeoutError:
                    yield _HEARTBEAT
                    continue
                if position > last and not client.overflow:
                    yield _Encoded(raw=raw if who.is_admin else owners)
                    last = position
        finally:
            self.clients.discard(client)


_ACCESS_EVENTS = frozenset({"TokenRevoked", "UserDisabled", "UserEnabled"})


def _end(client: _Client) -> None:
    """End a client's stream: it stops at its next wake-up, which this causes."""
    client.overflow = True
    with contextlib.suppress(asyncio.QueueFull):
        client.queue.put_nowait((-1, None, b"", b""))


def _frame(rec: Recorded, data: bytes | None = None) -> bytes:
    """The SSE frame of one event: ``id`` = position, ``event`` = type, JSON data."""
    return b"id: %d\r\nevent: %s\r\ndata: %s\r\n\r\n" % (rec.position, rec.type.encode(),
                                                         _data(rec) if data is None else data)


async def _refuse_past_head(state: State, after: int) -> None:
    """A resume point past the log's head: the events read up to it are not here (a log
    that lost its tail, a point from another server). Waiting there would be silence, and
    new events would come at positions the client thinks it has seen."""
    await state.store.catch_up()  # a copy of a shared log: another host's newest events
    head = await state.store.head_position()
    if after > head:
        raise HTTPException(status_code=409, detail=(
            f"Last-Event-ID (or after) {after} is past the head of the event log ({head}): this server does "
            "not hold the events you read up to there (its log lost them, or the position is another "
            f"server's). Resume from a position at most {head}, or without Last-Event-ID for new events only"),
            extra={"head": head})


@get("/events", tags=["events"], media_type="text/event-stream", responses=errors(409, 429),
     opt=sse_events(EVENTS))
async def events_stream(
    request: Request[Any, Any, Any], state: State, broadcaster: Broadcaster, who: Principal,
    after: Annotated[int | None, Parameter(
        ge=0, schema_extra={"minimum": 0},  # documented beside the null Litestar adds
        description="start after this position (default: now); Last-Event-ID wins")] = None,
) -> ServerSentEvent:
    """The log as server-sent events: ``id`` = position, ``event`` = type."""
    header = request.headers.get("last-event-id")
    if header:
        try:
            after = int(header)
        except ValueError as exc:
            raise HTTPException(status_code=400, detail="Last-Event-ID must be a log position "
                                "(an integer)") from exc
    start = broadcaster.position if after is None else max(0, after)
    if start > broadcaster.position:
        await _refuse_past_head(state, start)
    slot = state.stream_slots.take(who)  # a 429 beyond the caps on open streams
    return ServerSentEvent(held(slot, broadcaster.stream(who, start)), retry_duration=2000)
