"""Where a seqres launch's warps spend their time, by instruction class: sums Nsight Compute's sampled warp stalls
(the SourceCounters section, exported per SASS instruction by ``ncu_counters.sh source``) over classes of
instructions, with each class's leading stall reasons, and lists the instructions with the most samples.

    python -m bench.seqres.sass_regions ncu_source_case1.csv[.gz] [...] [--top 12]

A sample is charged to the instruction the warp is about to issue, so a wait can show on an instruction after the
thing waited for (a wgmma wait on ``WARPGROUP.DEPBAR``; a CTA barrier's wait a few instructions after ``BAR.SYNC``,
hence the separate line for the 'barrier' reason outside the wgmma waits).
CPU only."""
from __future__ import annotations

import argparse
import csv
import gzip
import re
from collections import Counter

# (class, opcodes: the part before the first dot). "flag sync": the group barrier's release, polls and L1 invalidations.
CLASSES = [
    ("wgmma", ("HGMMA", "WARPGROUP")),
    ("mma.sync", ("HMMA",)),
    ("async copy", ("LDGSTS", "LDGDEPBAR", "DEPBAR")),
    ("CTA barrier", ("BAR", "WARPSYNC")),
    ("flag sync", ("ATOMG", "RED", "CCTL", "MEMBAR", "YIELD", "NANOSLEEP")),
    ("MUFU", ("MUFU",)),
    ("global load/store", ("LDG", "STG", "LD", "ST")),
    ("shared memory", ("LDS", "STS", "LDSM", "STSM")),
    ("local (spills)", ("LDL", "STL")),
    ("shuffle", ("SHFL",)),
]


def opcode(sass: str) -> str:
    """The opcode of one SASS line, predicate stripped (``@!P0 BRA 0x..`` -> ``BRA``)."""
    s = re.sub(r"^@!?U?P\w+\s+", "", sass.strip())
    return s.split()[0] if s else ""


def klass(op: str) -> str:
    base = op.split(".")[0]
    for name, opcodes in CLASSES:
        if base in opcodes:
            return name
    return "other (integer, fp32, control)"


def read(path: str) -> list[dict]:
    """The per-instruction rows of ncu's source page (``--page source --csv --print-source sass``; gzipped or not)."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        rows = list(csv.reader(f))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    head = rows[start]
    ia = head.index("Warp Stall Sampling (All Samples)")
    stall = [(i, n[len("stall_"):]) for i, n in enumerate(head) if n.startswith("stall_") and "Not Issued" not in n]
    out = []
    for r in rows[start + 1:]:
        if len(r) <= ia or not r[1].strip():
            continue
        out.append(dict(addr=r[0], sass=r[1].strip(), samples=int(r[ia] or 0),
                        stalls={n: int(r[i] or 0) for i, n in stall}))
    return out


def summary(rows: list[dict], top: int = 12) -> str:
    total = sum(r["samples"] for r in rows) or 1
    by = {}
    for r in rows:
        c = klass(opcode(r["sass"]))
        s, st = by.get(c, (0, Counter()))
        st.update(r["stalls"])
        by[c] = (s + r["samples"], st)
    lines = [f"{len(rows)} SASS instructions, {total} warp samples", "class: % of samples (leading stall reasons)"]
    for c, (s, st) in sorted(by.items(), key=lambda kv: -kv[1][0]):
        lead = ", ".join(f"{n} {100 * v / max(s, 1):.0f}%" for n, v in st.most_common(3) if v)
        lines.append(f"  {c:32s} {100 * s / total:5.1f}%  ({lead})")
    # a warp held at a CTA barrier is charged to an instruction after it: the 'barrier' reason outside the wgmma
    # waits (which ncu also reports as 'barrier')
    cta = sum(r["stalls"].get("barrier", 0) for r in rows if klass(opcode(r["sass"])) != "wgmma")
    lines.append(f"  stall 'barrier' outside wgmma waits (warps held at a CTA barrier, e.g. while thread 0 or the "
                 f"polls of a group barrier spin): {100 * cta / total:.1f}%")
    lines.append(f"top {top} instructions:")
    for r in sorted(rows, key=lambda r: -r["samples"])[:top]:
        lead = max(r["stalls"].items(), key=lambda kv: kv[1])[0] if r["samples"] else ""
        lines.append(f"  {100 * r['samples'] / total:5.2f}%  {r['sass'][:70]:70s} {lead}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args(argv)
    for f in a.csv:
        print(f"== {f}")
        print(summary(read(f), a.top))


if __name__ == "__main__":
    main()
