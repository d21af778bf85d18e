"""Share sessions on the partition leader (Kafka's ShareSessionCache and
ShareSessionContext), sans-I/O.

A session is keyed by (group id, member id), one per member on this node.
The client's first request carries epoch 0 (a full request: a new session,
replacing any old one without releasing its records); the next must carry 1,
and each accepted request moves the epoch on by one (wrapping from INT32_MAX
to 1).  Epoch -1 ends the session after its acknowledgements.  Partitions
join a session when a ShareFetch names them and leave it when forgotten.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..protocol.errors import Err

INT32_MAX = 2**31 - 1
FINAL_EPOCH = -1
INITIAL_EPOCH = 0


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1                    # what the next request must carry
    # (topic id, partition) in the order they joined (dict: ordered set)
    partitions: dict = field(default_factory=dict)
    connection: object = None         # the connection it was opened on


@dataclass(slots=True)
class SessionContext:
    """What a request's epoch decides: an error (top level), or the session
    and, for a ShareFetch, the partitions to fetch and which joined now."""
    error_code: int = Err.NONE
    session: ShareSession | None = None
    full: bool = False                # epoch 0: answer every requested partition
    final: bool = False               # epoch -1: release and remove after acknowledging
    added: list = field(default_factory=list)


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions        # group.share.max.share.sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def for_fetch(self, group_id: str, member_id: str, epoch: int, requested: list,
                  forgotten: list, connection=None) -> SessionContext:
        """ShareFetch: open (0), continue (n) or finish (-1) a session."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if key not in self.sessions and len(self.sessions) >= self.max_sessions:
                return SessionContext(Err.SHARE_SESSION_LIMIT_REACHED)
            session = ShareSession(group_id, member_id, connection=connection)
            session.partitions = dict.fromkeys(requested)
            self.sessions[key] = session
            return SessionContext(session=session, full=True, added=list(session.partitions))
        ctx = self._continue(key, epoch)
        if ctx.error_code or ctx.final:
            return ctx
        session = ctx.session
        for tp in forgotten:
            session.partitions.pop(tp, None)
        for tp in requested:
            if tp not in session.partitions:
                session.partitions[tp] = None
                ctx.added.append(tp)
        return ctx

    def for_acknowledge(self, group_id: str, member_id: str, epoch: int) -> SessionContext:
        """ShareAcknowledge: epoch 0 is not allowed (no session to acknowledge in)."""
        if epoch == INITIAL_EPOCH:
            return SessionContext(Err.INVALID_SHARE_SESSION_EPOCH)
        return self._continue((group_id, member_id), epoch)

    def _continue(self, key: tuple[str, str], epoch: int) -> SessionContext:
        session = self.sessions.get(key)
        if session is None:
            return SessionContext(Err.SHARE_SESSION_NOT_FOUND)
        if epoch == FINAL_EPOCH:
            return SessionContext(session=session, final=True)
        if epoch != session.epoch:
            return SessionContext(Err.INVALID_SHARE_SESSION_EPOCH)
        session.epoch = next_epoch(session.epoch)
        return SessionContext(session=session)

    def remove(self, session: ShareSession) -> None:
        if self.sessions.get((session.group_id, session.member_id)) is session:
            del self.sessions[(session.group_id, session.member_id)]

    def on_connection(self, connection) -> list[ShareSession]:
        """The sessions opened on a connection (it closed: they end)."""
        return [s for s in self.sessions.values() if s.connection is connection]
