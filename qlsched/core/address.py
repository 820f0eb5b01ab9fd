"""``HOST:PORT``: the one parser of a listen address, for the cluster's ``http`` option and
the Edge's ``--http`` alike (a value is parsed where it enters and trusted after)."""

from __future__ import annotations

PORT_MAX = 65535


def parse_host_port(text: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as ``(host, port)``, or None when ``text`` is
    not one (no colon, no host, a port that is not 0..65535 in ASCII digits)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()):
        return None
    number = int(port)
    if number > PORT_MAX:
        return None
    return host.strip("[]"), number
