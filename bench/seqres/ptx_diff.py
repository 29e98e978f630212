"""The seqres kernel's sm_90 PTX for the published configurations, dumped per configuration, and a comparison of
two dumps: the proof that a change to the kernel or its host code left the published binaries alone.

    TRITON_DISABLE_LINE_INFO=1 python -m bench.seqres.ptx_diff dump OUT_DIR [--tune] [--raw DIR]
    python -m bench.seqres.ptx_diff compare OLD_DIR NEW_DIR [--drop-unread-params] [--only-common]

``dump`` compiles (no GPU needed, ``aot_check.compile_case``) every choice the published run made
(``prepare_info`` of ``docs/results/h200/raw/{correctness,timing}/h200/case*/auto.json``: the tune choice, its
split R and any shared-memory fit, on top of the yaml defaults), each with ``ffn1_scheme`` bf16x3 and f16_w1, and
the smoke cases on the defaults; ``--tune`` adds every tune candidate of ``config/variant/seqres.yaml`` on cases
1, 5, 6, 7, 9, 10, 11. The PTX is normalised: line info and debug sections dropped, the kernel's name replaced, and
each parameter named after its kernel argument (``param:x_ptr``), so a dump of an older tree compares by name.
``compare`` reports per configuration identical / different / missing; ``--drop-unread-params`` ignores the
declarations of parameters that the kernel never reads (an argument removed because it was dead) and where among
the instructions the parameter loads sit (each must still load the same parameter into the same register).
The file imports nothing outside ``kernels`` besides ``aot_check``, so it also runs on an older checkout where
``aot_check`` lived in ``kernels/seqres`` (copy it there and run it as a script)."""
from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path

_INFO_ONLY = ("shared_before", "shared_limit", "occupancy_before")


def _compile_case():
    try:
        from bench.seqres.aot_check import compile_case
    except ImportError:  # a checkout from before the lab tools moved to bench/
        from kernels.seqres.aot_check import compile_case
    return compile_case


def _seqres_cases() -> list[str]:
    from kernels import list_cases
    return list_cases(smoke=False, family="seqres")


def published_configs(raw: Path) -> list[tuple[str, str, dict]]:
    """(label, case, params) of every published choice, each with ffn1_scheme bf16x3 and f16_w1."""
    seen, out = set(), []
    for stage in ("correctness", "timing"):
        for case in _seqres_cases():
            f = raw / stage / "h200" / case / "auto.json"
            if not f.exists():
                continue
            info = json.loads(f.read_text()).get("prepare_info") or {}
            params = dict(info.get("params") or (info.get("tune") or {}).get("chosen_params") or {})
            params.update({k: v for k, v in (info.get("smem_fit") or {}).items() if k not in _INFO_ONLY})
            if "R" in info:
                params["split"] = info["R"]
            for f1 in (("bf16x3",) if "params" in info else ("bf16x3", "f16_w1")):
                p = dict(params, ffn1_scheme=f1, tune="off")
                key = (case, json.dumps(p, sort_keys=True))
                if key in seen:
                    continue
                seen.add(key)
                out.append((f"{case}_{stage}_{f1}", case, p))
    return out


def tune_configs() -> list[tuple[str, str, dict]]:
    from kernels.seqres.host import DEFAULTS
    return [(f"{case}_tune{i:02d}", case, dict(over, tune="off")) for case in _seqres_cases()
            for i, over in enumerate([{}] + list(DEFAULTS.get("tune") or []))]


def _runtime_arg_names(meta: dict) -> list[str]:
    from kernels.seqres.megakernel import _seqres_fwd
    return [n for n in _seqres_fwd.arg_names if n not in meta]


def normalise(ptx: str, arg_names: list[str]) -> str:
    """Drop line info, debug sections and comments; name the kernel K and its parameters after the arguments."""
    out, skip = [], False
    for ln in ptx.splitlines():
        s = ln.strip()
        if s.startswith(".section") and ".debug" in s:
            skip = True
        if skip:
            if s == "}":
                skip = False
            continue
        if s.startswith((".loc", ".file", "//")) or re.fullmatch(r"\$L__tmp\d+:", s) or not s:
            continue
        out.append(ln.rstrip())
    text = "\n".join(out) + "\n"
    m = re.search(r"\.entry\s+(\w+)\(", text)
    name = m.group(1) if m else "_seqres_fwd"

    def param(mm):
        i = int(mm.group(1))
        return f"param:{arg_names[i]}" if i < len(arg_names) else f"param:extra{i - len(arg_names)}"
    text = re.sub(re.escape(name) + r"_param_(\d+)", param, text)
    return text.replace(name, "K")


def drop_unread_params(text: str) -> str:
    """Remove the declarations of parameters that no instruction reads, and move every parameter load (``ld.param``,
    which has no other effect than filling its register) to the end of the text, sorted: with fewer parameters LLVM
    places the entry block's loads elsewhere among the first instructions, into the same registers."""
    lines = text.splitlines()
    used = set(re.findall(r"\[(param:\w+)", text))
    keep = [ln for ln in lines if not (re.match(r"\s*\.param\s", ln) and
                                       (m := re.search(r"(param:\w+)", ln)) and m.group(1) not in used)]
    # the last kept declaration loses its comma only when the removed ones followed it: compare without commas
    keep = [re.sub(r",\s*$", "", ln) if ".param" in ln else ln for ln in keep]
    loads = sorted(ln.strip() for ln in keep if ln.lstrip().startswith("ld.param."))
    rest = [ln for ln in keep if not ln.lstrip().startswith("ld.param.")]
    return "\n".join(rest + ["// parameter loads:"] + loads) + "\n"


def dump(out: Path, raw: Path, with_tune: bool) -> None:
    from kernels import list_cases, load_case
    compile_case = _compile_case()
    out.mkdir(parents=True, exist_ok=True)
    configs = published_configs(raw) + [(f"{c}_defaults", c, dict(tune="off")) for c in list_cases(smoke=True)]
    if with_tune:
        configs += tune_configs()
    index = {}
    for label, case, params in configs:
        try:
            k, dt, meta = compile_case(load_case(case), params)
        except Exception as e:  # a configuration this tree refuses: recorded, compared as missing
            index[label] = dict(case=case, params=params, error=f"{type(e).__name__}: {e}"[:300])
            print(f"{label}: {index[label]['error']}", flush=True)
            continue
        text = normalise(k.asm["ptx"], _runtime_arg_names(meta))
        (out / f"{label}.ptx").write_text(text)
        index[label] = dict(case=case, params=params, lines=text.count("\n"))
        print(f"{label}: {dt:.1f}s, {text.count(chr(10))} lines", flush=True)
    (out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True))


def compare(old: Path, new: Path, drop: bool, only_common: bool = False) -> int:
    def index(d: Path) -> dict:  # (a dump still running has no index yet: its .ptx files so far)
        f = d / "index.json"
        return json.loads(f.read_text()) if f.exists() else {p.stem: {} for p in d.glob("*.ptx")}
    a, b = index(old), index(new)
    labels = sorted(set(a) & set(b) if only_common else set(a) | set(b))
    bad = 0
    for label in labels:
        fa, fb = old / f"{label}.ptx", new / f"{label}.ptx"
        if not (fa.exists() and fb.exists()):
            why = (a.get(label) or {}).get("error") or (b.get(label) or {}).get("error") or "not dumped"
            print(f"{label}: missing ({why})")
            bad += 1
            continue
        ta, tb = fa.read_text(), fb.read_text()
        if drop:
            ta, tb = drop_unread_params(ta), drop_unread_params(tb)
        if ta == tb:
            print(f"{label}: identical ({ta.count(chr(10))} lines)")
            continue
        bad += 1
        diff = list(difflib.unified_diff(ta.splitlines(), tb.splitlines(), lineterm="", n=0))
        print(f"{label}: DIFFERENT ({len(diff)} diff lines)")
        print("\n".join(diff[:20]))
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("--raw", type=Path, default=Path("docs/results/h200/raw"))
    d.add_argument("--tune", action="store_true", help="also every tune candidate on the 7 seqres cases")
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    c.add_argument("--drop-unread-params", action="store_true")
    c.add_argument("--only-common", action="store_true", help="compare the configurations both dumps hold")
    a = ap.parse_args(argv)
    if a.cmd == "dump":
        dump(a.out, a.raw, a.tune)
        return 0
    return compare(a.old, a.new, a.drop_unread_params, a.only_common)


if __name__ == "__main__":
    sys.exit(main())
