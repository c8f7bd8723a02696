"""One communication layer: every MPI call, type, constant and include of megatron.c lives in
src/parallel_state/comm.c (issue 10). Every C source and header under src/, tools/ and include/
is read with its comments and string literals blanked (a comment may say "MPI_Abort", and the
launcher reads environment variables such as "MPI_LOCALRANKID"), then searched for an MPI
identifier (MPI_* or PMPI_*), an include of mpi.h, or the build's MC_HAVE_MPI switch (a module
compiled differently with MPI knows about MPI). Each use outside the layer is a failure naming
its file:line. The scanner itself is checked on a few lines it must flag and must let pass."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import SRC, check, summary  # noqa: E402

LAYER = {os.path.join("src", "parallel_state", "comm.c")}
ROOTS = ("src", "tools", "include")
USE = re.compile(r"\b(P?MPI_\w+|MC_HAVE_MPI)\b|#\s*include\s*[<\"]mpi\.h[>\"]")
# a comment, a string or character literal (escapes included); newlines are kept so that
# line numbers stay right
TOKEN = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)


def blank(text):
    """text with every comment and literal replaced by spaces (an include's <mpi.h> or
    "mpi.h" is kept: the include pattern must still see it)."""
    def repl(m):
        s = m.group(0)
        before = text[:m.start()].rsplit("\n", 1)[-1]
        if s.startswith('"') and re.search(r"#\s*include\s*$", before):
            return s
        return re.sub(r"[^\n]", " ", s)
    return TOKEN.sub(repl, text)


def uses(text):
    """(line number, the MPI use) of every use in text."""
    out = []
    for no, line in enumerate(blank(text).split("\n"), 1):
        for m in USE.finditer(line):
            out.append((no, m.group(0)))
    return out


def self_test():
    flagged = ["#include <mpi.h>", '#include "mpi.h"', "MPI_Comm c;", "x = MPI_FLOAT;",
               "rc = MPI_Iallreduce(a, b);", "#if defined(MC_HAVE_MPI)", "PMPI_Init(0, 0);"]
    passed = ["/* MPI_Abort brings the job down */", "// MPI_Comm_split",
              'getenv("MPI_LOCALRANKID")',
              "mc_comm_all_reduce(c, b, n, MC_DTYPE_F32, MC_COMM_SUM, w);",
              "/* a comment\n   over MPI_Wait lines */", 'puts("say \\"MPI_X\\"");',
              "int SOME_MPI_THING;"]
    for s in flagged:
        check(uses(s), "the scanner misses %r" % s)
    for s in passed:
        check(not uses(s), "the scanner flags %r: %s" % (s, uses(s)))


def main():
    self_test()
    found, files = [], 0
    for root in ROOTS:
        for d, _, names in os.walk(os.path.join(SRC, root)):
            for n in sorted(names):
                if not n.endswith((".c", ".h")):
                    continue
                path = os.path.join(d, n)
                rel = os.path.relpath(path, SRC)
                files += 1
                if rel in LAYER:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    found += [(rel, no, what) for no, what in uses(f.read())]
    check(files > 50, "only %d C files found under %s (wrong source directory?)"
          % (files, ", ".join(ROOTS)))
    for rel, no, what in found:
        print("%s:%d: %s outside the communication layer (src/parallel_state/comm.c)"
              % (rel, no, what))
    check(not found, "%d MPI uses outside the communication layer" % len(found))
    # the layer itself must still be where MPI is (the scan looks at the right tree)
    with open(os.path.join(SRC, "src", "parallel_state", "comm.c"), encoding="utf-8") as f:
        check(uses(f.read()), "src/parallel_state/comm.c has no MPI use: the layer moved?")
    return summary("test_comm_layer_only", "(%d files)" % files)


if __name__ == "__main__":
    sys.exit(main())
