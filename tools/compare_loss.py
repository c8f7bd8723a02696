#!/usr/bin/env python3
"""compare_loss LOG_A LOG_B: the lm loss of two training runs, iteration by iteration, against
the loss-alignment criteria MindSpore Transformers publishes for a migrated model (the first
step's loss within 0.5 %, the mean within 1 %), and a PNG of both curves and their difference
(docs/alignment.md). B is the reference.

Each input is a Megatron-format log (the training lines ' [..] iteration N/ M | ... | lm loss:
X | ...' that Megatron-LM and megatron.c print) or a TensorBoard directory (the 'lm loss'
scalars of its events.out.tfevents.* files, as --tensorboard-dir writes them).

usage: compare_loss.py [--png OUT.png] [--first-tol 0.005] [--mean-tol 0.01] [--label-a A]
                       [--label-b B] LOG_A LOG_B
Exit status: 0 both criteria met, 1 a criterion failed, 2 unreadable input. Standard library
only: the PNG is written with zlib.
"""
import math
import os
import re
import struct
import sys
import zlib

LINE = re.compile(r"\biteration\s+(\d+)/\s*\d+ \|.*?\| lm loss: ([-+0-9.eEnaNinf]+) \|")


class InputError(Exception):
    pass


# ---- reading ---------------------------------------------------------------------------

def read_log(path):
    """iteration -> lm loss from the training lines of a log (the last value of a repeated
    iteration wins: a resumed run logs it again)."""
    out = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.search(line)
            if m:
                out[int(m.group(1))] = float(m.group(2))
    if not out:
        raise InputError("%s: no training lines with 'lm loss' (expected Megatron's "
                         "' iteration N/ M | ... | lm loss: X |' lines)" % path)
    return out


def _varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def _fields(buf):
    """(field number, wire type, value) of a protobuf message (values: int, or bytes for
    length-delimited fields, or the raw 4/8 bytes of fixed fields)."""
    i, out = 0, []
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise InputError("unsupported protobuf wire type %d" % wt)
        out.append((num, wt, v))
    return out


def read_tensorboard(path, tag="lm loss"):
    """step -> value of the scalar `tag` in a TensorBoard directory (Event.step = field 2,
    Event.summary = 5, Summary.value = 1, Value.tag = 1, Value.simple_value = 2)."""
    files = sorted(f for f in os.listdir(path) if "tfevents" in f)
    if not files:
        raise InputError("%s: no events.out.tfevents.* files (not a TensorBoard directory)" % path)
    out = {}
    for name in files:
        with open(os.path.join(path, name), "rb") as f:
            data = f.read()
        i = 0
        while i + 12 <= len(data):  # TFRecord: u64 length, u32 crc, data, u32 crc
            (n,) = struct.unpack_from("<Q", data, i)
            rec = data[i + 12:i + 12 + n]
            i += 12 + n + 4
            step, values = 0, []
            for num, wt, v in _fields(rec):
                if num == 2 and wt == 0:
                    step = v
                elif num == 5 and wt == 2:
                    values += [_fields(x) for n2, w2, x in _fields(v) if n2 == 1 and w2 == 2]
            for fields in values:
                t = [v for n3, w3, v in fields if n3 == 1 and w3 == 2]
                s = [v for n3, w3, v in fields if n3 == 2 and w3 == 5]
                if t and s and t[0].decode(errors="replace") == tag:
                    out[step] = struct.unpack("<f", s[0])[0]
    if not out:
        raise InputError("%s: no '%s' scalars" % (path, tag))
    return out


def read_losses(path):
    if os.path.isdir(path):
        return read_tensorboard(path)
    if not os.path.exists(path):
        raise InputError("%s: no such file or directory" % path)
    return read_log(path)


# ---- criteria --------------------------------------------------------------------------

def compare(a, b, first_tol=0.005, mean_tol=0.01):
    """(rows, summary): per common iteration (it, a, b, relative difference (a - b) / |b|);
    the first step's and the mean absolute relative difference with their verdicts."""
    its = sorted(set(a) & set(b))
    if not its:
        raise InputError("the two runs have no iteration in common")
    rows = [(it, a[it], b[it], (a[it] - b[it]) / abs(b[it]) if b[it] else math.inf) for it in its]
    first = abs(rows[0][3])
    mean = sum(abs(r[3]) for r in rows) / len(rows)
    return rows, {"first_iteration": its[0], "first": first, "first_ok": first <= first_tol,
                  "mean": mean, "mean_ok": mean <= mean_tol, "max": max(abs(r[3]) for r in rows)}


# ---- the PNG ---------------------------------------------------------------------------

# 3x5 digits and the few signs the axis labels need, rows top to bottom, 3 bits each
FONT = {"0": "75557", "1": "26227", "2": "71747", "3": "71717", "4": "55711", "5": "74717",
        "6": "74757", "7": "71111", "8": "75757", "9": "75717", ".": "00002", "-": "00700",
        "e": "25743", "%": "51245", "+": "02720", " ": "00000", "A": "25755",
        "B": "65656"}


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def dot(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = 3 * (y * self.w + x)
            self.px[i:i + 3] = bytes(c)

    def line(self, x0, y0, x1, y1, c, width=1, dash=0):
        n = max(abs(x1 - x0), abs(y1 - y0), 1)
        for k in range(n + 1):
            if dash and (k // dash) % 2:
                continue
            x = round(x0 + (x1 - x0) * k / n)
            y = round(y0 + (y1 - y0) * k / n)
            for dx in range(width):
                for dy in range(width):
                    self.dot(x + dx, y + dy, c)

    def text(self, x, y, s, c=(0, 0, 0), scale=2):
        for ch in s:
            rows = FONT.get(ch, FONT[" "])
            for r, bits in enumerate(rows):
                v = int(bits, 16)
                for col in range(3):
                    if v & (4 >> col):
                        for dx in range(scale):
                            for dy in range(scale):
                                self.dot(x + col * scale + dx, y + r * scale + dy, c)
            x += 4 * scale

    def png(self, path):
        raw = b"".join(b"\x00" + bytes(self.px[3 * self.w * y:3 * self.w * (y + 1)])
                       for y in range(self.h))

        def chunk(kind, data):
            return (struct.pack(">I", len(data)) + kind + data +
                    struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
        body = (b"\x89PNG\r\n\x1a\n" +
                chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(body)
        os.replace(tmp, path)


BLUE, ORANGE, RED, GREY = (31, 119, 180), (255, 127, 14), (214, 39, 40), (150, 150, 150)


def _panel(cv, box, xs, series, lo, hi, marks=()):
    """Axes in box (x0, y0, x1, y1), each (points, colour) of series as a polyline, dashed
    horizontal lines at `marks`, the y range labelled."""
    x0, y0, x1, y1 = box
    if hi <= lo:
        lo, hi = lo - 1e-12 - abs(lo) * 1e-6, hi + 1e-12 + abs(hi) * 1e-6
    X = lambda i: x0 + (x1 - x0) * (i - xs[0]) / max(xs[-1] - xs[0], 1)  # noqa: E731
    Y = lambda v: y1 - (y1 - y0) * (v - lo) / (hi - lo)  # noqa: E731
    cv.line(x0, y1, x1, y1, (0, 0, 0))
    cv.line(x0, y0, x0, y1, (0, 0, 0))
    for m in marks:
        if lo <= m <= hi:
            cv.line(x0, round(Y(m)), x1, round(Y(m)), GREY, dash=6)
    for k, (pts, c) in enumerate(series):  # the first one widest: it shows under an equal second
        for (i, v), (j, w) in zip(pts, pts[1:]):
            cv.line(round(X(i)) - (k == 0), round(Y(v)) - (k == 0), round(X(j)) - (k == 0),
                    round(Y(w)) - (k == 0), c, width=4 if k == 0 and len(series) > 1 else 2)
        for i, v in pts:
            for d in range(-2, 3):
                cv.dot(round(X(i)) + d, round(Y(v)), c)
    cv.text(4, y0, "%.4g" % hi)
    cv.text(4, y1 - 10, "%.4g" % lo)
    cv.text(x0, y1 + 6, "%d" % xs[0])
    cv.text(x1 - 8 * len(str(xs[-1])), y1 + 6, "%d" % xs[-1])


def plot(rows, path, mean_tol):
    """Top: both loss curves (A blue, B orange); bottom: (A - B) / |B| in percent (red), with
    dashed lines at +-mean_tol."""
    cv = Canvas(800, 600)
    xs = [r[0] for r in rows]
    vals = [r[1] for r in rows] + [r[2] for r in rows]
    _panel(cv, (90, 20, 780, 330), xs, [([(r[0], r[1]) for r in rows], BLUE),
                                         ([(r[0], r[2]) for r in rows], ORANGE)],
           min(vals), max(vals))
    pct = [100 * r[3] for r in rows]
    span = max(max(abs(p) for p in pct), 100 * mean_tol * 1.2)
    _panel(cv, (90, 380, 780, 570), xs, [([(r[0], 100 * r[3]) for r in rows], RED)], -span, span,
           marks=(100 * mean_tol, -100 * mean_tol, 0.0))
    cv.text(700, 384, "%", RED)
    for k, (name, c) in enumerate((("A", BLUE), ("B", ORANGE))):  # the legend
        cv.line(700, 30 + 16 * k, 730, 30 + 16 * k, c, width=3)
        cv.text(740, 25 + 16 * k, name, c)
    cv.png(path)


def main(argv):
    opts = {"--png": None, "--first-tol": "0.005", "--mean-tol": "0.01", "--label-a": None,
            "--label-b": None}
    pos = []
    i = 0
    while i < len(argv):
        s = argv[i]
        if s in ("-h", "--help"):
            print(__doc__)
            return 0
        if s in opts:
            if i + 1 >= len(argv):
                print("compare_loss: error: expected one argument after %s" % s, file=sys.stderr)
                return 2
            opts[s] = argv[i + 1]
            i += 2
            continue
        if s.startswith("-"):
            print("compare_loss: error: unrecognized argument: %s" % s, file=sys.stderr)
            return 2
        pos.append(s)
        i += 1
    if len(pos) != 2:
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        print("compare_loss: error: expected LOG_A LOG_B", file=sys.stderr)
        return 2
    try:
        ft, mt = float(opts["--first-tol"]), float(opts["--mean-tol"])
        a, b = read_losses(pos[0]), read_losses(pos[1])
        rows, s = compare(a, b, ft, mt)
    except (InputError, OSError, ValueError) as e:
        print("compare_loss: %s" % e, file=sys.stderr)
        return 2
    la, lb = opts["--label-a"] or pos[0], opts["--label-b"] or pos[1]
    print("A = %s\nB = %s (reference)" % (la, lb))
    print("%10s %16s %16s %14s" % ("iteration", "lm loss A", "lm loss B", "(A-B)/|B|"))
    for it, x, y, r in rows:
        print("%10d %16.9g %16.9g %+14.6e" % (it, x, y, r))
    print("first step (iteration %d): |relative difference| %.4f %% %s %.2f %%: %s" % (
        s["first_iteration"], 100 * s["first"], "<=" if s["first_ok"] else ">", 100 * ft,
        "met" if s["first_ok"] else "NOT met"))
    print("mean over %d iterations: |relative difference| %.4f %% %s %.2f %%: %s (max %.4f %%)" % (
        len(rows), 100 * s["mean"], "<=" if s["mean_ok"] else ">", 100 * mt,
        "met" if s["mean_ok"] else "NOT met", 100 * s["max"]))
    if opts["--png"]:
        plot(rows, opts["--png"], mt)
        print("wrote %s" % opts["--png"])
    ok = s["first_ok"] and s["mean_ok"]
    print("loss alignment: %s" % ("within the criteria" if ok else "beyond the criteria"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
