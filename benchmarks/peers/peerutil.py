"""Helpers the Python peers share."""
import socket


def free_port():
    """A free TCP port on 127.0.0.1 for a rendezvous (MASTER_PORT)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p
