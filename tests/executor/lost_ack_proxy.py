"""A TCP proxy in front of a real PostgreSQL server that loses one acknowledgement: once
armed, the first ``COMMIT`` of a transaction that wrote twice's commit record reaches the
server (which commits it), and the connection is then cut before the answer reaches the
client. Killing a backend during COMMIT does not do this (the commit has always finished
first); a lost network answer does. The protocol is read only as far as message framing."""

from __future__ import annotations

import socket
import threading
import time

from twice.destinations.commits import COMMITS_TABLE


class LostAckProxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = False
        self.any_commit = False  # armed for the next COMMIT, whatever it commits
        self.dropped = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        server = socket.create_connection(self.target)
        drop = threading.Event()

        def upstream() -> None:
            buffer, startup, recorded = b"", True, False
            try:
                while data := client.recv(65536):
                    if startup:  # the startup message has no type byte
                        startup = False
                        server.sendall(data)
                        continue
                    buffer += data
                    while len(buffer) >= 5:
                        size = int.from_bytes(buffer[1:5], "big")
                        if len(buffer) < 1 + size:
                            break
                        kind, body = buffer[:1], buffer[5:1 + size]
                        buffer = buffer[1 + size:]
                        if kind in (b"Q", b"P") and COMMITS_TABLE.encode() in body \
                                and b"INSERT" in body.upper():
                            recorded = True
                        if (kind == b"Q" and body.strip(b"\0 ;").upper() == b"COMMIT"
                                and (recorded or self.any_commit) and self.armed):
                            self.armed = False
                            self.dropped += 1
                            drop.set()
                        if kind == b"Q" and body.strip(b"\0 ;").upper() in (b"COMMIT",
                                                                              b"ROLLBACK"):
                            recorded = False
                    server.sendall(data)
            except OSError:
                pass

        def downstream() -> None:
            try:
                while data := server.recv(65536):
                    if drop.is_set():
                        time.sleep(0.2)  # the server commits; the answer never arrives
                        for end in (client, server):
                            try:
                                end.shutdown(socket.SHUT_RDWR)
                            except OSError:
                                pass
                        return
                    client.sendall(data)
            except OSError:
                pass
            finally:
                client.close()

        threading.Thread(target=upstream, daemon=True).start()
        threading.Thread(target=downstream, daemon=True).start()
