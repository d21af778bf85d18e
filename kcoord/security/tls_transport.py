"""TLS for a listener, as a protocol wrapped around the Kafka connection.

asyncio's own `ssl=` hides a failed handshake (a plaintext client on a TLS
port shows up nowhere), so TLS is run here over memory BIOs: the first
byte tells a TLS client (a handshake record, 0x16) from anything else,
which is closed with a log line saying it was not TLS.  The wrapped
protocol sees an ordinary transport; `get_extra_info("peercert")` gives
the verified client certificate for mTLS principals.
"""
from __future__ import annotations

import asyncio
import logging
import ssl

from . import audit

log = logging.getLogger("kcoord.tls")

TLS_HANDSHAKE_RECORD = 0x16
RECORD_SLACK = 17 * 1024  # one TLS record's plaintext (16 KiB) and change


class TlsTransport(asyncio.Transport):
    """What the inner protocol writes to: encrypts onto the raw transport."""

    def __init__(self, owner: "TlsServerProtocol") -> None:
        super().__init__()
        self._owner = owner

    def write(self, data) -> None:
        self._owner.write_app(data)

    def writelines(self, chunks) -> None:
        self._owner.write_app(b"".join(chunks))

    def close(self) -> None:
        self._owner.close()

    def abort(self) -> None:
        self._owner.close()

    def is_closing(self) -> bool:
        return self._owner.closed

    def pause_reading(self) -> None:
        if not self._owner.closed:
            self._owner.raw.pause_reading()

    def resume_reading(self) -> None:
        if not self._owner.closed:
            self._owner.raw.resume_reading()

    def is_reading(self) -> bool:
        return self._owner.raw.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._owner.raw.get_write_buffer_size()

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        self._owner.raw.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return False

    def get_extra_info(self, name, default=None):
        return self._owner.extra_info(name, default)


class TlsServerProtocol(asyncio.Protocol):
    def __init__(self, context: ssl.SSLContext, inner: asyncio.Protocol, listener: str) -> None:
        self.context = context
        self.inner = inner
        self.listener = listener
        self.raw: asyncio.Transport | None = None
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.sslobj: ssl.SSLObject | None = None
        self.handshaken = False
        self.seen_first = False
        self.closed = False
        self.peer = "?"

    # ---------------------------------------------------------------- raw side
    def connection_made(self, transport) -> None:
        self.raw = transport
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"
        self.sslobj = self.context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        # the _ssl object's own read(n, buffer): ssl.SSLObject.read only forwards
        # to it, and a Python-level call per TLS record shows in produce profiles
        self._read = getattr(self.sslobj, "_sslobj", self.sslobj).read

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if not self.seen_first:
            self.seen_first = True
            if data[0] != TLS_HANDSHAKE_RECORD:
                log.warning("closing connection %s on TLS listener %s: not TLS (first byte "
                            "0x%02x; a plaintext Kafka client on a TLS port?)",
                            self.peer, self.listener, data[0])
                self.close()
                return
        self.incoming.write(data)
        if not self.handshaken:
            try:
                self.sslobj.do_handshake()
            except ssl.SSLWantReadError:
                self._send_outgoing()
                return
            except (ssl.SSLError, ssl.CertificateError) as exc:
                self._send_outgoing()
                audit.failed_authentication(self.peer.rsplit(":", 1)[0], self.listener,
                                            f"SSL handshake failed: {exc}")
                self.close()
                return
            self.handshaken = True
            self._send_outgoing()
            self.inner.connection_made(TlsTransport(self))
            if self.closed:
                return
        self._decrypt()

    def _decrypt(self) -> None:
        """Decrypt all that is readable into one fresh bytearray handed to the
        inner protocol (no bytes object per TLS record, no join): plaintext
        is no longer than the ciphertext waiting, plus a record OpenSSL may
        hold back from an earlier read.  Clients write records of a few KB
        (librdkafka: one per buffer segment), so a 256 KB read is ~100
        records: the loop calls the C-level read (not ssl.py's wrapper) and
        does nothing else per record."""
        size = self.incoming.pending + RECORD_SLACK
        plain = bytearray(size)
        view = memoryview(plain)
        filled = 0
        read = self._read
        try:
            while True:
                n = read(size - filled, view[filled:])
                if not n:  # the peer's close_notify
                    self.close()
                    break
                filled += n
                if filled == size:  # not expected; grow (the view must go first)
                    view.release()
                    plain += bytes(size)
                    size *= 2
                    view = memoryview(plain)
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            self.close()
        except ssl.SSLError as exc:
            view.release()
            log.warning("closing connection %s: TLS error: %s", self.peer, exc)
            self.close()
            return
        view.release()
        if not self.closed:
            self._send_outgoing()  # post-handshake messages (TLS 1.3 tickets, key updates)
        if filled:
            del plain[filled:]
            self.inner.data_received(plain)

    def eof_received(self):
        return False

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self.handshaken:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.handshaken:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.handshaken:
            self.inner.resume_writing()

    # ----------------------------------------------------------- app side
    def write_app(self, data) -> None:
        if self.closed:
            return
        view = memoryview(data)
        while view:
            n = self.sslobj.write(view)
            view = view[n:]
        self._send_outgoing()

    def _send_outgoing(self) -> None:
        if self.outgoing.pending and not self.raw.is_closing():
            self.raw.write(self.outgoing.read())

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.handshaken:
                # send our close_notify: asyncio TLS clients (aiokafka) otherwise wait
                # out their 30 s ssl_shutdown_timeout for it when they close
                try:
                    self.sslobj.unwrap()
                except (ssl.SSLError, ValueError):
                    pass
                self._send_outgoing()
            self.raw.close()

    def extra_info(self, name, default=None):
        if name == "peercert":
            return self.sslobj.getpeercert() if self.sslobj else default
        if name == "ssl_object":
            return self.sslobj
        if name == "cipher":
            return self.sslobj.cipher()
        return self.raw.get_extra_info(name, default)
