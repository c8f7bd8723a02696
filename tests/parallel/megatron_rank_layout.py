"""Megatron's own rank layout, computed live: loads RankGenerator and
generate_masked_orthogonal_rank_groups from Megatron-LM's megatron/core/parallel_state.py
(core_v0.12.1, pure Python) without importing megatron.core (whose package imports need a newer
torch), and writes the groups of many (tp, ep, dp, pp, cp, order) combinations in the text
format tests/mpi/test_parallel_state.c reads:

    tp ep dp pp cp order token group;group;...     (a group is comma-separated world ranks)

Usage: /usr/bin/python3 megatron_rank_layout.py [MEGATRON_DIR] > rank_layout.txt
"""
import ast
import os
import sys
import typing

DENSE_TOKENS = ["dp", "dp-cp", "cp", "tp-pp", "tp", "pp", "tp-dp-cp", "tp-dp", "tp-cp"]
EXPERT_TOKENS = ["ep", "tp", "tp-ep", "tp-ep-pp", "dp"]
ORDERS = ["tp-cp-ep-dp-pp", "tp-pp-dp", "tp-dp-pp", "pp-dp-tp", "dp-cp-tp-pp", "cp-tp-pp-dp"]


def load_rank_generator(megatron_dir):
    path = os.path.join(megatron_dir, "megatron", "core", "parallel_state.py")
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    wanted = {"generate_masked_orthogonal_rank_groups", "RankGenerator"}
    body = [n for n in tree.body if getattr(n, "name", None) in wanted]
    if len(body) != 2:
        raise SystemExit("could not find RankGenerator in " + path)
    ns = {"List": typing.List}
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), ns)
    return ns["RankGenerator"]


def combos():
    """(tp, ep, dp, pp, cp, order, tokens) for worlds up to 48."""
    out = []
    sizes = [1, 2, 3, 4]
    for order in ORDERS:
        names = order.split("-")
        for tp in sizes:
            for pp in sizes:
                for dp in [1, 2, 4]:
                    for cp in [1, 2]:
                        if tp * pp * dp * cp > 48:
                            continue
                        dims = {"tp": tp, "pp": pp, "dp": dp, "cp": cp}
                        if any(v != 1 and k not in names for k, v in dims.items()):
                            continue
                        out.append((tp, 1, dp, pp, cp, order, DENSE_TOKENS))
    for order in ["tp-cp-ep-dp-pp", "tp-ep-dp-pp", "ep-tp-pp-dp"]:
        for tp in [1, 2]:
            for ep in [2, 4]:
                for dp in [1, 2]:
                    for pp in [1, 2]:
                        out.append((tp, ep, dp, pp, 1, order, EXPERT_TOKENS))
    return out


def layout_lines(megatron_dir):
    RankGenerator = load_rank_generator(megatron_dir)
    lines = []
    for tp, ep, dp, pp, cp, order, tokens in combos():
        g = RankGenerator(tp=tp, ep=ep, dp=dp, pp=pp, cp=cp, order=order, rank_offset=0)
        for token in tokens:
            groups = g.get_ranks(token)
            text = ";".join(",".join(str(r) for r in grp) for grp in groups)
            lines.append(f"{tp} {ep} {dp} {pp} {cp} {order} {token} {text}")
    return lines


if __name__ == "__main__":
    mdir = sys.argv[1] if len(sys.argv) > 1 else "/work/ref/Megatron-LM"
    sys.stdout.write("\n".join(layout_lines(mdir)) + "\n")
