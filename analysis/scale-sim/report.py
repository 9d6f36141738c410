"""analysis/scale-sim/README.md from the predictions run.sh kept in out/: per platform and
reader, the stall as a share of the step against ranks, where it crosses 10%, where the
busiest server saturates, and the accelerators each reader feeds at AU >= 90%."""

import glob
import json
import os
import statistics
import sys

PLATFORMS = (("testbed", "the GlusterFS testbed scaled out (8 ranks per 2-core node)"),
             ("testbed-cursor", "the same, naive `cursor` (to 256 ranks)"),
             ("lustre-flash", "a described all-flash Lustre (platforms/lustre-flash.yaml), "
                              "the testbed's fitted reader costs"))


def _load(d):
    with open(os.path.join(d, "prediction.json")) as f:
        pred = json.load(f)
    with open(os.path.join(d, "validation.json")) as f:
        return pred, json.load(f)


def _first(points, test):
    return next((p["ranks"] for p in points if test(p)), None)


def _table(pred):
    by = {}
    for p in pred["points"]:
        by.setdefault(p["reader"], []).append(p)
    ranks = sorted({p["ranks"] for p in pred["points"]})
    out = ["| reader | " + " | ".join(f"{n:,}" for n in ranks) + " |",
           "|---|" + "---:|" * len(ranks)]
    for r, pts in sorted(by.items()):
        cell = {p["ranks"]: f"{1e3 * p['stall_s_per_step']:,.0f} / {p['au_percent']:.0f}"
                for p in pts}
        out.append(f"| {r} | " + " | ".join(cell.get(n, "") for n in ranks) + " |")
    out += ["", "| reader | not computing >= 10% of the step (AU <= 90%) from | busiest server >= 80% from | "
            "accelerators at AU >= 90% | at the largest P: dominated by |", "|---|---|---|---|---|"]
    sup = pred.get("accelerators_supported", {})
    for r, pts in sorted(by.items()):
        pts = sorted(pts, key=lambda p: p["ranks"])
        cross = _first(pts, lambda p: p["au_percent"] <= 90)
        sat = _first(pts, lambda p: p["server_utilisation_percent"] >= 80)
        s = sup.get(r, {})
        acc = "none" if s.get("ranks") is None else f"{s['ranks']:,}" + (
            " or more" if s.get("at_least") else "")
        out.append(f"| {r} | {cross or 'never'} | {sat or 'never'} | {acc} | "
                   f"{pts[-1]['dominant']} |")
    return out


def _straggler(here):
    """Median straggler wait % of the step per (sweep, reader, ranks) of testbed-runs/."""
    out = {}
    for sweep in sorted(glob.glob(os.path.join(here, "testbed-runs", "*", "sweep.json"))):
        with open(sweep) as f:
            doc = json.load(f)
        for r in doc["runs"]:
            if r.get("status") == "done" and r.get("figures"):
                key = (os.path.basename(os.path.dirname(sweep)), r["point"]["reader"],
                       r["point"]["ranks"])
                out.setdefault(key, []).append(r["figures"]["straggler_wait_percent"])
    return {k: statistics.median(v) for k, v in out.items()}


def _rows(rows):
    return (["| case | P | stall ms measured | simulated | error | AU % measured | simulated |",
             "|---|---|---|---|---|---|---|"]
            + [f"| {r['reader']} | {r['ranks']} | {1e3 * r['measured_stall_s']:.1f} | "
               f"{1e3 * r['simulated_stall_s']:.1f} | {100 * r['stall_err_rel']:+.0f}% | "
               f"{r['measured_au_percent']:.1f} | {r['simulated_au_percent']:.1f} |"
               for r in rows])


def _cursor(rows):
    """How naive `cursor`'s stall grows from 2 to 4 ranks, measured against simulated."""
    at = {r["ranks"]: r for r in rows if r["reader"].startswith("naive-cursor")}
    if 2 not in at or 4 not in at or not at[2]["measured_stall_s"]:
        return []
    m = at[4]["measured_stall_s"] / at[2]["measured_stall_s"]
    sim = at[4]["simulated_stall_s"] / max(at[2]["simulated_stall_s"], 1e-9)
    return [f"Naive `cursor`'s measured stall grows {m:.0f}x from 2 to 4 ranks, the simulated "
            f"one {sim:.1f}x: the extra bytes the model gives a cursor (the first page of "
            "every record it steps over) explain only part of it."]


def _own(here):
    """The validation on the sweeps recorded in testbed-runs/."""
    d = os.path.join(here, "out", "testbed-own")
    if not os.path.isdir(d):
        return []
    pred, val = _load(d)
    held = val["held_out"]
    st = _straggler(here)
    top = held["held_out_ranks"]
    waits = ", ".join(f"{k[0]} {k[1]} {v:.0f}%" for k, v in sorted(st.items()) if k[2] == top)
    def stall_ok(r):  # 15% of the measured stall or 1 ms, whichever is larger
        return abs(r["stall_err_s"]) <= max(0.15 * r["measured_stall_s"], 1e-3)

    def au_ok(r):
        return abs(r["au_err_points"]) <= 3

    def names(rows):
        return ", ".join(r["reader"] for r in rows) or "none"
    pts = held["points"]
    return ["## Validation on sweeps recorded for it (`testbed-runs/`)", "",
            "The GlusterFS testbed (500 us per brick request), 2,048 ImageNet-like JPEGs, batch "
            "16, 20 ms emulated compute, cold, a barrier ending every step (`--exchange-bytes "
            "0`); naive `get` (global), naive `cursor` (none), coordinated (global and none) at "
            "1, 2, 4, 8 ranks, 3 interleaved repeats each (`hpcio.sweep`), compared at the "
            "median of the repeats. " + f"{pred['fit']}.", "",
            "Simulated back (calibrated on every point):", ""] + _rows(val["simulated_back"]) + [
            "", f"Held out: calibrated on P in {held['calibrated_on_ranks']}, predicting "
            f"P={top}:", ""] + _rows(held["points"]) + [
            "", f"Within the targets: stall (15% or 1 ms) for "
            f"{names([r for r in pts if stall_ok(r)])}; AU (3 points) for "
            f"{names([r for r in pts if au_ok(r)])}; both for "
            f"{names([r for r in pts if stall_ok(r) and au_ok(r)])}. Where it misses: at "
            f"{top} ranks on this 2-core machine the ranks outnumber the cores 4 to 1, and "
            f"ranks wait at the step's barrier for ranks the scheduler has not run yet (median "
            f"straggler wait {waits} of the step) while each rank's own wait stays a few ms; "
            "the fitted run queue (a woken rank queues behind the bursts of CPU ahead of it, "
            "its reader's bytes costing CPU per MiB, each of gloo's log2 P barrier rounds "
            "costing the last rank to arrive what the runs measured and waking every rank "
            "once) brings the step's length closer to the measured one (the AU errors "
            "above), but places less of the wait at the barrier than the runs show."
            ] + _cursor(val["simulated_back"]) + [""]


def main(here):
    lines = ["# Prediction at scale: naive `get` and `cursor` against coordinated, 1 to 4,096 "
             "ranks (`hpcio.simulate`)", "",
             "Made by `analysis/scale-sim/run.sh` (SimGrid; no root, no MPI). Calibrated on the "
             "recorded GlusterFS testbed runs (2,048 ImageNet-like JPEGs in a 2-shard LMDB, "
             "500 us per brick request, batch 16 per rank, 20 ms emulated compute, cold; naive "
             "`get` and coordinated at 1, 2, 4 ranks). Predicted with 1,000,000 records so "
             "4,096 ranks have a batch each; naive `cursor` and shuffle `none` are predicted "
             "from the `get` and global-shuffle runs' costs, not calibrated on runs of their "
             "own. Stall is Table A's stall/step max-rank; AU is compute / wall. A described system "
             "(platforms/lustre-flash.yaml) is predicted by run.sh when its section is here: "
             "its 274 striped servers make every request many flows, which costs far more "
             "than the testbed's two.", ""]
    for name, what in PLATFORMS:
        d = os.path.join(here, "out", name)
        if not os.path.isdir(d):
            continue
        pred, val = _load(d)
        lines += [f"## {what}", "", f"{pred['fit']}.", ""]
        held = val.get("held_out")
        if held:
            errs = ", ".join(f"{p['reader']} {100 * p['stall_err_rel']:+.0f}% stall, "
                             f"{p['au_err_points']:+.1f} AU points" for p in held["points"])
            lines += [f"Held out: calibrated on P in {held['calibrated_on_ranks']}, predicting "
                      f"P={held['held_out_ranks']}: {errs}.", ""]
        else:
            lines += ["Unvalidated on this platform (its storage is described, not measured).", ""]
        lines += ["Stall ms per step (max rank) / AU %, per rank count:", ""] + _table(pred) + [""]
    lines += _own(here)
    lines += ["## Against LMDBIO's published trend", "",
              "LMDBIO (Pumma et al.; the abstract carried in shared/papers/002) reports Caffe's "
              "LMDB read time growing with the number of processes, since every process walks "
              "the whole database through mmap, while LMDBIO's stays flat, for up to ~20x in "
              "run time at scale. The simulation reproduces the mechanism: the naive `cursor` "
              "brings in every record's first page for every rank, so its bytes per rank grow "
              "with P; alone it stalls less than `get` (its walk is sequential), and from 16 "
              "ranks on its stall grows 4 to 7x per doubling of the ranks and passes `get`'s "
              "(the cursor table above). The coordinated reader's stall stays near 0 up to 4 "
              "ranks, then grows with the transfer and, once the busiest server nears "
              "saturation, follows the servers' bandwidth. What it does not reproduce: Caffe's own per-process CPU costs beyond "
              "the testbed's fitted per-sample cost.", ""]
    with open(os.path.join(here, "README.md"), "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {here}/README.md")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
