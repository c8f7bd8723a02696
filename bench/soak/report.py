"""Reads bench/soak/run.sh's samples.csv and writes summary.md (growth of resident memory, open
file descriptors and threads after warm-up) and soak.svg (the three over time) beside it.
Plain SVG, no plotting package needed. Usage: report.py OUT_DIR [WARMUP_FRACTION=0.2]"""
import csv
import os
import sys

out = sys.argv[1]
warm_frac = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(open(os.path.join(out, "samples.csv")))]
if len(rows) < 10:
    raise SystemExit("report.py: only %d samples in %s" % (len(rows), out))
last_it = max(r["iteration"] for r in rows)
warm = [r for r in rows if r["iteration"] >= warm_frac * last_it] or rows
metrics = [("rss_kb", "resident memory (VmRSS)", "KiB", 1), ("fds", "open file descriptors", "", 1),
           ("threads", "threads", "", 1)]


def slope(xs, ys):
    """least-squares slope of ys over xs"""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


lines = ["| metric | at warm-up end (iteration %d) | final (iteration %d) | min / max after warm-up | "
         "growth after warm-up | trend per 1000 iterations |" % (warm[0]["iteration"], warm[-1]["iteration"]),
         "|---|---|---|---|---|---|"]
for key, name, unit, scale in metrics:
    v = [r[key] * scale for r in warm]
    its = [r["iteration"] for r in warm]
    fmt = (lambda x: "%d %s" % (round(x), unit)) if unit else (lambda x: "%d" % round(x))
    tr = slope(its, v) * 1000
    lines.append("| %s | %s | %s | %s / %s | %+d%s | %+.2f%s |" % (
        name, fmt(v[0]), fmt(v[-1]), fmt(min(v)), fmt(max(v)), round(v[-1] - v[0]), " " + unit if unit else "",
        tr, " " + unit if unit else ""))
lines.append("")
lines.append("%d samples over %.0f s; warm-up: the first %d%% of the iterations." % (
    len(rows), rows[-1]["t_s"], round(100 * warm_frac)))
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))

# three stacked panels over the iteration axis
W, H, PAD, GAP = 720, 170, 60, 30
svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
       'font-size="11">' % (W, 3 * (H + GAP) + 20), '<rect width="100%" height="100%" fill="white"/>']
x_max = last_it or 1
for k, (key, name, unit, scale) in enumerate(metrics):
    top = 10 + k * (H + GAP)
    v = [r[key] * scale for r in rows]
    lo, hi = min(v), max(v)
    if hi - lo < 1e-9:
        lo, hi = lo - 1, hi + 1
    lo, hi = lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo)
    px = lambda it: PAD + (W - PAD - 10) * it / x_max  # noqa: E731
    py = lambda y: top + H - H * (y - lo) / (hi - lo)  # noqa: E731
    svg.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (PAD, top, W - PAD - 10, H))
    wx = px(warm[0]["iteration"])
    svg.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="#eee"/>' % (PAD, top, wx - PAD, H))
    pts = " ".join("%.1f,%.1f" % (px(r["iteration"]), py(y)) for r, y in zip(rows, v))
    svg.append('<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="%s"/>' % pts)
    svg.append('<text x="%d" y="%d">%s%s</text>' % (PAD + 4, top + 14, name, " (%s)" % unit if unit else ""))
    for y in (lo, (lo + hi) / 2, hi):
        svg.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (PAD - 4, py(y) + 4, round(y)))
    for it in (0, x_max // 2, x_max):
        svg.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (px(it), top + H + 13, it))
svg.append('<text x="%d" y="%d" text-anchor="middle">iteration (shaded: warm-up)</text>' % (W // 2, 3 * (H + GAP) + 12))
svg.append("</svg>")
open(os.path.join(out, "soak.svg"), "w").write("\n".join(svg) + "\n")
print("wrote", os.path.join(out, "summary.md"), "and", os.path.join(out, "soak.svg"))
