#!/usr/bin/python3
"""Drop files on an X11 window, as a file manager does: an XDND source.

    xdnd_drop.py WINDOW-ID PATH...

Speaks the XDND protocol, version 5 (freedesktop.org, "Drag-and-Drop
Protocol for the X Window System", https://freedesktop.org/wiki/Specifications/XDND/):
own XdndSelection, XdndEnter (version 5, type text/uri-list) to the target,
XdndPosition at its centre, wait for XdndStatus accepting, XdndDrop, answer
the target's SelectionRequest with the paths as file:// URIs (a text/uri-list,
RFC 2483 section 5: one URI a line, CRLF; RFC 8089 file URIs, percent-encoded
UTF-8), wait for XdndFinished. No pointer moves and no window manager is
needed: the messages go straight to the target (a real source finds it under
the pointer). Exits 1 with the step that timed out or was refused.

Needs python3-xlib (Debian package python3-xlib, 0.33).
"""

import os
import select
import sys
import time
import urllib.parse

from Xlib import X, Xatom, display, protocol

XDND_VERSION = 5
STEP_TIMEOUT = 10.0  # seconds for each answer from the target


def fail(msg):
    print("xdnd_drop: " + msg, file=sys.stderr)
    sys.exit(1)


def uri_list(paths):
    """text/uri-list (RFC 2483 section 5): file:// URIs, CRLF after each."""
    lines = ["file://" + urllib.parse.quote(os.path.abspath(p), safe="/") for p in paths]
    return ("\r\n".join(lines) + "\r\n").encode("utf-8")


def main():
    if len(sys.argv) < 3:
        fail("usage: xdnd_drop.py WINDOW-ID PATH...")
    d = display.Display()
    atom = lambda name: d.intern_atom(name)
    A = {n: atom(n) for n in ("XdndAware", "XdndSelection", "XdndEnter", "XdndPosition", "XdndStatus",
                              "XdndDrop", "XdndFinished", "XdndLeave", "XdndActionCopy", "text/uri-list")}
    root = d.screen().root
    target = d.create_resource_object("window", int(sys.argv[1], 0))
    data = uri_list(sys.argv[2:])

    aware = target.get_full_property(A["XdndAware"], Xatom.ATOM)
    if aware is None or not aware.value:
        fail("window %s has no XdndAware property: it takes no drops" % sys.argv[1])
    version = min(XDND_VERSION, aware.value[0])
    if version < XDND_VERSION:
        fail("window %s speaks XDND version %d, this source needs %d" % (sys.argv[1], aware.value[0], XDND_VERSION))

    # The source window: never mapped; it owns the selection and gets the
    # target's answers (events sent with an empty mask go to its creator).
    source = root.create_window(0, 0, 1, 1, 0, X.CopyFromParent)
    source.set_selection_owner(A["XdndSelection"], X.CurrentTime)
    if d.get_selection_owner(A["XdndSelection"]).id != source.id:
        fail("could not own XdndSelection")

    def send(kind, l1=0, l2=0, l3=0, l4=0):
        ev = protocol.event.ClientMessage(window=target, client_type=A[kind],
                                          data=(32, [source.id, l1, l2, l3, l4]))
        target.send_event(ev, event_mask=X.NoEventMask)
        d.flush()

    def wait(what, match):
        """The first event match accepts (handling selection requests
        meanwhile), or exit after STEP_TIMEOUT."""
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:
            while d.pending_events():
                ev = d.next_event()
                if ev.type == X.SelectionRequest:
                    answer(ev)
                if match(ev):
                    return ev
            left = deadline - time.monotonic()
            if left <= 0:
                fail("timed out after %.0f s waiting for %s" % (STEP_TIMEOUT, what))
            select.select([d.fileno()], [], [], left)

    served = []

    def answer(req):
        """Give the requestor the URI list (ICCCM section 2.2), or refuse."""
        prop = req.property
        if req.selection != A["XdndSelection"] or req.target != A["text/uri-list"]:
            prop = X.NONE
        else:
            req.requestor.change_property(prop, A["text/uri-list"], 8, data)
            served.append((req.requestor.id, d.get_atom_name(prop), len(data)))
        notify = protocol.event.SelectionNotify(time=req.time, requestor=req.requestor, selection=req.selection,
                                                target=req.target, property=prop)
        req.requestor.send_event(notify)
        d.flush()

    def client(kind):
        return lambda ev: ev.type == X.ClientMessage and ev.client_type == A[kind]

    geo = target.get_geometry()
    at = root.translate_coords(target, geo.width // 2, geo.height // 2)
    # XdndEnter: l1 = version << 24, bit 0 clear (the types are l2..l4).
    send("XdndEnter", version << 24, A["text/uri-list"])
    # XdndPosition: l2 = x << 16 | y (root coordinates), l3 time, l4 action.
    send("XdndPosition", 0, (at.x << 16) | at.y, X.CurrentTime, A["XdndActionCopy"])
    status = wait("XdndStatus", client("XdndStatus"))
    if not status.data[1][1] & 1:
        send("XdndLeave")
        fail("the target refused the drop (XdndStatus without accept)")
    send("XdndDrop", 0, X.CurrentTime)
    finished = wait("XdndFinished", client("XdndFinished"))
    if not served:
        fail("XdndFinished before the target asked for the data")
    # Version 5: l1 bit 0 says the target took the data. GLFW (the X11
    # backend of Fyne) puts there the count of bytes it read instead
    # (x11_window.c, SelectionNotify: data.l[1] = result), so any non-zero
    # l1 is taken as success; 0 is a refusal either way.
    if not finished.data[1][1]:
        fail("the target says it did not take the drop (XdndFinished %s, selection requests %s)" % (finished.data[1], served))
    print("dropped %d paths on window %s at %d,%d" % (len(sys.argv) - 2, sys.argv[1], at.x, at.y))


if __name__ == "__main__":
    main()
