"""Published training runs: measured step time beside memderive's prediction (a benchmark, not a test).

    python benchmarks/published_runs.py            # the table: predicted vs measured, each run's error
    python benchmarks/published_runs.py --plan     # each published layout beside the planner's best (slow)

The runs, their sources and the assumptions where a paper is silent are in ``tests/published_runs.py``;
``tests/test_published_runs.py`` holds the same bounds this prints (median and worst error).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memderive.derivations.hardware import gpu  # noqa: E402
from memderive.derivations.quantities.cluster import ALL_REDUCE_MEASURED, NVLINK_MEASURED  # noqa: E402
from memderive.derivations.quantities.nccl_cost import node_ring_s, nvlink_bus  # noqa: E402
from memderive.derivations.quantities.host_timeline import host_of, moe_host_exposed_s, moe_layer_host_s  # noqa: E402
from memderive.derivations.search.plan import PlanError  # noqa: E402
from tests.published_runs import DGXC, DGXC_GAP  # noqa: E402
from tests.published_runs import DGXC_LLAMA, DGXC_LLAMA_GAP  # noqa: E402
from tests.published_runs import (BRIDGE_DENSE_GAP, BRIDGE_LORA, BRIDGE_NVFP4, BRIDGE_SFT, DENSE_APART,  # noqa: E402
                                  FITTED, HELD_OUT, MOE, MOE_DROP_AND_PAD, MOE_HOST_GAP, NARAYANAN_PTD, NVFP4_GAP, RUNS,
                                  SFT_GAP,
                                  TITAN_2025_GAP, TITAN_FLOAT8_GAP, TORCHTITAN_2025, TORCHTITAN_FLOAT8, ZERO3_2021, ZERO3_GAP, Run, moe_memory, predict)
from tests.published_runs import PLAN_SLACK, faster_published, plan_against  # noqa: E402


def _rows(title: str, runs: list[Run]) -> list[float]:
    """One line per run; MFU: the source's (where it states one, its own FLOP count), memderive's FLOPs over the
    measured step, and over the predicted step (bf16 dense peak)."""
    print(f"{title}\n{'run':26s} {'source':52s} {'layout':21s} {'GPUs':>6s} {'batch':>6s} {'seq':>7s} "
          f"{'measured s':>11s} {'predicted s':>12s} {'error':>7s} {'MFU pub.':>8s} {'meas.':>6s} {'pred.':>6s}")
    errors = []
    for run in runs:
        p = predict(run)
        errors.append(abs(p.error))
        lay = run.layout
        layout = (f"t{lay.get('tp', 1)} p{lay.get('pp', 1)} v{lay.get('virtual_stages') or 1} c{lay.get('cp', 1)} "
                  f"d{lay.get('dp', 1)}")
        print(f"{run.name:26s} {run.source[:52]:52s} {layout:21s} {run.gpus:6d} {run.global_batch:6d} {run.seq:7d} "
              f"{p.measured_s:11.2f} {p.predicted_s:12.2f} {p.error:+7.1%} "
              f"{'' if run.published_mfu is None else format(run.published_mfu, '.1%'):>8s} "
              f"{run.measured_mfu():6.1%} {p.mfu:6.1%}")
    print(f"{len(runs)} runs: median |error| {statistics.median(errors):.1%}, worst {max(errors):.1%}\n")
    return errors


def table() -> list[float]:
    fitted = _rows("Megatron-LM on Selene (the runs the time model's constants were once fitted on; since issue 39 "
                   "nothing is fitted: kernel benchmarks only, efficiency.py)", FITTED)
    held = _rows("Held out: never used to fit anything", HELD_OUT)
    _rows("Held out, apart from the bounds: Narayanan et al. 2021 Table 2's PTD-P rows, beside its ZeRO-3 ones "
          "(tests/published_runs.NARAYANAN_PTD)", NARAYANAN_PTD)
    _rows(f"Held out, apart from the bounds: {BRIDGE_DENSE_GAP}", DENSE_APART)
    _rows(f"Held out, apart from the bounds: {NVFP4_GAP}", BRIDGE_NVFP4)
    _rows(f"Held out, apart from the bounds: {SFT_GAP}", BRIDGE_SFT)
    _rows("Held out, apart from the bounds: Megatron-Bridge's Llama 3 70B LoRA at 4,096 tokens (26.06), rank 16 on "
          "linear_qkv: tests/published_runs.BRIDGE_LORA", BRIDGE_LORA)
    _rows(f"Held out, apart from the bounds: {DGXC_LLAMA_GAP}", DGXC_LLAMA)
    weak_scaling(DGXC_LLAMA)
    _rows(f"Held out, apart from the bounds: {TITAN_FLOAT8_GAP}", TORCHTITAN_FLOAT8)
    _rows(f"Held out, apart from the bounds: {TITAN_2025_GAP}", TORCHTITAN_2025)
    _rows(f"Held out, apart from the bounds: {DGXC_GAP}", DGXC)
    moe()
    groups()
    dense_memory()
    zero3()
    node_ring()
    export_links()
    return fitted + held


def node_ring() -> None:
    """NCCL's one-node ring (``nccl_cost.node_ring_s``, what A100 and V100 nodes' collectives take) on 8 H100s,
    against OpenXLA's measured all-reduce there (``cluster.ALL_REDUCE_MEASURED``): the model's throughput over the
    measured, from 4 MiB to 2 GiB and below (where NCCL's model picks its LL protocol)."""
    h100 = gpu("h100-sxm")
    ratios = {size: size / node_ring_s(h100, "all_reduce", size, 8) / 1e9 / rate
              for size, rate in ALL_REDUCE_MEASURED[("sm_90", 8)]}
    large = [r for size, r in ratios.items() if size >= 2**22]
    small = ", ".join(f"{size >> 20} MiB {r:.2f}x" for size, r in ratios.items() if size < 2**22)
    print(f"\nNCCL's one-node ring on 8 H100s against OpenXLA's measured all-reduce: 4 MiB to 2 GiB "
          f"{min(large):.2f}x-{max(large):.2f}x of the measured throughput; {small} (LL)")


def export_links() -> None:
    """The export variants' NVLink at NCCL's per-link speed (``nccl_cost.nvlink_bus``) against what was measured over
    it (``cluster.NVLINK_MEASURED``): the measured over the model."""
    for name, rows in NVLINK_MEASURED.items():
        hw = gpu(name)
        model = nvlink_bus(hw, hw.link_bandwidth / 2)
        ratios = ", ".join(f"{what} {gbs:g} GB/s ({gbs / model:.2f}x)" for what, gbs, _ in rows)
        print(f"{hw.title}'s NVLink at NCCL's per-link speed, {model:.1f} GB/s each way, against {ratios}")


def weak_scaling(runs: list[Run]) -> None:
    """Each recipe's step time from its smallest to its largest cluster (the same layout, DP and the global batch
    grown together), measured and predicted: the rows that differ only in their ``d`` (their name without it)."""
    recipes: dict[str, list[Run]] = {}
    for run in runs:
        recipes.setdefault(re.sub(r" d[0-9]+ ", " ", run.name), []).append(run)
    print(f"{'weak scaling, one recipe':34s} {'GPUs':>11s} {'measured s':>13s} {'ratio':>6s} {'predicted s':>13s} "
          f"{'ratio':>6s}")
    for name, rows in recipes.items():
        if len(rows) < 2:
            continue
        first, last = predict(rows[0]), predict(rows[-1])
        print(f"{name:34s} {rows[0].gpus:5d}-{rows[-1].gpus:<5d} {first.measured_s:6.2f}-{last.measured_s:<6.2f} "
              f"{last.measured_s / first.measured_s:6.3f} {first.predicted_s:6.2f}-{last.predicted_s:<6.2f} "
              f"{last.predicted_s / first.predicted_s:6.3f}")
    print()


def groups() -> None:
    """Median and worst |error| per GPU, framework and dense/MoE, with each run's published MFU (where its source
    gives one) beside memderive's."""
    rows: dict[tuple[str, str, str], list[float]] = {}
    for run in (FITTED + HELD_OUT + MOE + DENSE_APART + BRIDGE_NVFP4 + TORCHTITAN_FLOAT8 + BRIDGE_SFT + BRIDGE_LORA
                + DGXC_LLAMA + TORCHTITAN_2025 + DGXC + NARAYANAN_PTD):
        p = predict(run)
        framework = run.layout.get("framework") or ("torchtitan" if "torchtitan" in run.source else
                                                    "automodel" if "AutoModel" in run.source else
                                                    "deepspeed" if run.layout.get("grad_sync") == "deepspeed" else
                                                    "megatron" if "Megatron" in run.note or "Narayanan" in run.source
                                                    or "Korthikanti" in run.source or "MegaScale" in run.source
                                                    else "llama3")
        moe = ("moe" if any(run is r for r in MOE) else
               f"sft {run.layout['fp8']}" if any(run is r for r in BRIDGE_SFT) else
               f"lora {run.layout['fp8']}" if any(run is r for r in BRIDGE_LORA) else
               f"dgxc {run.layout.get('fp8', 'bf16')}" if any(run is r for r in DGXC_LLAMA) else
               f"dgxc {run.layout['fp8']}" if any(run is r for r in DGXC) else
               f"dense-apart {run.layout.get('fp8', 'bf16')}" if any(run is r for r in DENSE_APART + BRIDGE_NVFP4
                                                                    + TORCHTITAN_FLOAT8 + TORCHTITAN_2025) else
               "dense")
        rows.setdefault((run.gpu, framework, moe), []).append(abs(p.error))
    print(f"{'GPU':12s} {'framework':12s} {'kind':23s} {'runs':>5s} {'median':>8s} {'worst':>8s}")
    for key, errors in sorted(rows.items()):
        print(f"{key[0]:12s} {key[1]:12s} {key[2]:23s} {len(errors):5d} {statistics.median(errors):8.1%} "
              f"{max(errors):8.1%}")
    every = [abs(predict(r).error) for r in FITTED + HELD_OUT]
    print(f"all {len(every)} dense runs: median |error| {statistics.median(every):.1%}, worst {max(every):.1%}")
    every += [abs(predict(r).error) for r in DENSE_APART]
    print(f"with the {len(DENSE_APART)} apart (tests/published_runs.DENSE_APART): {len(every)} dense runs, median |error| "
          f"{statistics.median(every):.1%}, worst {max(every):.1%}")
    added = [(TORCHTITAN_FLOAT8, "torchtitan's {n} Float8 rows", "TORCHTITAN_FLOAT8"),
             (BRIDGE_SFT, "Megatron-Bridge's {n} SFT rows", "BRIDGE_SFT"),
             (BRIDGE_LORA, "Megatron-Bridge's {n} LoRA rows", "BRIDGE_LORA"),
             (DGXC_LLAMA, "dgxc-benchmarking's {n} Llama 3.1 / GPT-3 rows", "DGXC_LLAMA"),
             (TORCHTITAN_2025, "torchtitan's {n} rows of its 2025 pages", "TORCHTITAN_2025"),
             (DGXC, "dgxc-benchmarking's {n} Nemotron-4 rows", "DGXC"),
             (NARAYANAN_PTD, "Narayanan et al.'s {n} PTD-P rows of Table 2", "NARAYANAN_PTD")]
    for runs, words, name in added:  # each group on top of the ones before it
        every += [abs(predict(r).error) for r in runs]
        print(f"with {words.format(n=len(runs))} too (tests/published_runs.{name}): {len(every)} dense runs, median "
              f"|error| {statistics.median(every):.1%}, worst {max(every):.1%}, {sum(e <= 0.25 for e in every)} within "
              f"25%" + ("\n" if runs is NARAYANAN_PTD else ""))


def moe() -> None:
    """The MoE runs (held out, apart from the dense runs' bounds), their expert-parallel time, and whether each
    layout fits memderive's device bytes (or what memderive assumes that the run did not)."""
    _rows("Mixture of experts, held out (tests/published_runs.MOE)", MOE)
    print("gap/layer: (measured - predicted) over the micro-batches times the layers a GPU runs, in ms: what the model "
          "leaves out per MoE layer and micro-batch; fwd GPU: a third of the predicted step in that unit (a forward's "
          "share of compute); fwd host: the counted host work of one MoE layer's forward, the segment between the "
          "dispatcher's syncs (router, two TE GroupedLinear calls, one GEMM per local expert; quantities/"
          "host_timeline.py), a lower bound; exposed: max(G, H) - G, forward and backward")
    print(f"{'run':32s} {'EP s':>6s} {'EP link':>10s} {'gap/layer':>10s} {'fwd GPU':>8s} {'fwd host':>9s} "
          f"{'exposed':>8s} {'memderive GiB':>14s} {'GPU GiB':>8s}  fits, or what is assumed")
    needed, binds, applied = [], 0, []
    for run in MOE:
        p = predict(run)
        need, capacity, assumed = moe_memory(run)
        lay, per_node = run.layout, run.cluster().gpus_per_node
        link = "network" if lay.get("ep", 1) * lay.get("tp", 1) > per_node else "NVLink"
        sizes = run.estimate().model.sizes
        layers = sizes["l"] // lay.get("pp", 1)
        gap, gpu_ms = per_layer_ms(run, p.measured_s - p.predicted_s), per_layer_ms(run, p.predicted_s)
        # the recipe's CUDA graphs over the router (the row's cuda_graph_scope), DeepEP's router kernels
        router = ("graphed" if "moe_router" in run.cuda_graph_scope else
                  "deepep" if lay.get("moe_dispatcher") == "deepep" else "fused")
        host = (sizes["E"] // lay.get("ep", 1), host_of(run.gpu), router)  # local experts, host CPU, router
        forward, backward = moe_layer_host_s(*host)
        exposed = moe_host_exposed_s(gpu_ms / 3e3, gpu_ms * 2 / 3e3, *host) * 1e3
        needed.append(gap / (forward + backward) / 1e3)
        binds += exposed > 0
        applied.append((p.predicted_s + exposed / 1e3 * lay.get("micro_batches", 1) * layers) / p.measured_s - 1)
        print(f"{run.name:32s} {p.parts['ep_comm_time_s']:6.2f} {link:>10s} {gap:10.2f} "
              f"{gpu_ms / 3:8.2f} {forward * 1e3:9.2f} {exposed:8.2f} {need / 2**30:14.1f} "
              f"{capacity / 2**30:8.0f}  {'fits' if not assumed else 'over: ' + assumed}"
              f"{'; assumed: ' + run.assumed if run.assumed else ''}")
    ratios = [x for x in needed if x > 0]
    print(f"host binds (max(G, H) > G) on {binds} of {len(MOE)} rows; with the exposed host time added to every row: "
          f"median |error| {statistics.median(abs(x) for x in applied):.1%}, worst {max(abs(x) for x in applied):.1%}, "
          f"{sum(abs(x) <= 0.25 for x in applied)} within 25% (not in the step time); the gap is "
          f"{min(ratios):.0f}-{max(ratios):.0f}x the counted host work per layer\n")
    drop_and_pad()


def per_layer_ms(run: Run, seconds: float) -> float:
    """``seconds`` of a step over the micro-batches times the layers a GPU runs, in ms (the "gap/layer" unit)."""
    lay = run.layout
    return seconds / (lay.get("micro_batches", 1) * (run.estimate().model.sizes["l"] // lay.get("pp", 1))) * 1e3


def drop_and_pad() -> None:
    """The 25.09 token-drop rows of three 25.11 dropless layouts (``MOE_HOST_GAP``): per MoE layer and micro-batch,
    measured with and without the dropless dispatcher's per-layer device-to-host sync, and memderive's prediction."""
    _rows(f"Evidence, apart from the bounds: {MOE_HOST_GAP}", MOE_DROP_AND_PAD)
    print(f"{'per layer and micro-batch, ms':32s} {'drop-and-pad':>12s} {'dropless':>9s} {'predicted':>10s}")
    for run in MOE_DROP_AND_PAD:
        twin = next(r for r in MOE if r.name == run.name.replace("Qwen3 30B tokendrop", "Qwen3 30B-A3B"))
        p = predict(run)
        print(f"{run.name:32s} {per_layer_ms(run, p.measured_s):12.2f} {per_layer_ms(twin, twin.measured()):9.2f} "
              f"{per_layer_ms(run, p.predicted_s):10.2f}")
    print()


def dense_memory() -> None:
    """Issue 39's memory check over the dense runs: each published layout that ran fits its GPU in memderive's
    device bytes (``total_bytes``), or the row names what memderive assumes that the run may not have done."""
    runs = (FITTED + HELD_OUT + DENSE_APART + BRIDGE_NVFP4 + TORCHTITAN_FLOAT8 + BRIDGE_SFT + BRIDGE_LORA + DGXC_LLAMA
            + TORCHTITAN_2025 + DGXC)
    over = []
    for run in runs:
        need, capacity = run.estimate().number("total_bytes"), run.memory_bytes or gpu(run.gpu).memory_bytes
        if need > capacity:
            assumed = "; ".join(p.strip() for p in re.split(r"[;,]", run.note) if "assum" in p) or "none named"
            over.append(f"{run.name[:34]:34s} {need / 2**30:7.1f} GiB of {capacity / 2**30:5.1f}; assumed: {assumed}")
    print(f"Dense memory: {len(runs) - len(over)} of {len(runs)} published layouts fit their GPU in memderive's "
          "device bytes (total_bytes); over it:")
    print("\n".join(over) + "\n")


def zero3() -> None:
    """Narayanan et al. 2021 Table 2's DeepSpeed ZeRO-3 rows, held out and outside the bounds (``ZERO3_GAP``), with
    the per-GPU rate of ZeRO-3's traffic the measured step implies: 3 x 2 B x parameters over the step."""
    _rows(f"Held out, not modelled (outside the bounds): {ZERO3_GAP}", ZERO3_2021)
    for run in ZERO3_2021:
        p = predict(run)
        traffic = 3 * 2 * run.estimate().number("parameters")
        print(f"{run.name:26s} ZeRO-3 traffic 3 x 2 B x P = {traffic / 1e9:7.1f} GB per GPU per step: "
              f"{traffic / p.measured_s / 1e9:5.1f} GB/s over the measured step; the model's dp time "
              f"{p.parts['dp_comm_time_s']:.2f} s (hidden), compute {p.parts['compute_time_s']:.2f} s")
    print()


def _shown(options: dict) -> str:
    """A layout as t p v c d, ZeRO, micro-batch size x count (and uneven first/last stages)."""
    o = options
    out = (f"t{o.get('tp', 1)} p{o.get('pp', 1)} v{o.get('virtual_stages') or 1} c{o.get('cp', 1)} d{o.get('dp', 1)} "
           f"z{o.get('zero', 0)} b{o.get('batch')}x{o.get('micro_batches') or 1}")
    if (o.get("ep") or 1) > 1:
        out += f" e{o['ep']}"
    if o.get("first_stage_layers") is not None:
        out += f" {o['first_stage_layers']}/{o.get('last_stage_layers')}"
    return out


def _release(run: Run) -> str:
    """The software release a run's source names (Megatron-Bridge's page: "26.02 NeMo container"), else its source."""
    found = re.search(r"\b(\d\d\.\d\d(?:\.\d+)?) NeMo", run.source)
    return found.group(1) if found else run.source.split(",")[0]


def against_plan() -> None:
    """Each published layout's predicted time beside the planner's best on its cluster (``plan_against``)."""
    print(f"The published layout against the planner's best on the same cluster (within: published <= {PLAN_SLACK:g} "
          "x best)\n"
          f"{'run':24s} {'published layout':34s} {'pred. s':>8s} {'planner best':36s} {'best s':>8s} {'ratio':>6s}")
    within, beaten, apart = 0, [], []
    for run in RUNS + MOE:
        try:
            c = plan_against(run)
        except PlanError as exc:
            need = run.estimate().number("total_bytes")
            print(f"{run.name:24s} {_shown(run.layout):34s} {predict(run).predicted_s:8.2f} no layout fits: {exc}; "
                  f"the published layout needs {need:,} bytes, {need - gpu(run.gpu).memory_bytes:,} over")
            continue
        within += c.within
        faster = faster_published(run, RUNS + MOE)
        if run.layout_chosen_for:
            apart.append((run, c.within))
        elif faster is not None:
            beaten.append((run, faster, c.within))
        print(f"{run.name:24s} {_shown(run.layout):34s} {c.published_s:8.2f} {_shown(c.best.options):36s} "
              f"{c.best.step_time_s:8.2f} {c.ratio:6.3f}{'' if c.within else ' over'}")
    total = len(RUNS) + len(MOE)
    print(f"{within} of {total} published layouts within {PLAN_SLACK - 1:.0%} of the planner's best "
          f"({len(MOE)} of them MoE, the expert-parallel degree searched too)")
    for run, ok in apart:
        print(f"Run under other options than its layout was chosen for: {run.name} ({_shown(run.layout)}), chosen for "
              f"{run.layout_chosen_for}; {'within' if ok else 'not within'} {PLAN_SLACK - 1:.0%} of the planner's best")
    if beaten:
        print(f"Published layouts that another published layout of the same job and recipe (model, GPUs, global batch, "
              f"sequence, recompute, every option not planned; tests.published_runs.same_job) measured more than "
              f"{PLAN_SLACK - 1:.0%} faster:")
    for run, faster, ok in beaten:
        print(f"  {run.name:24s} {_shown(run.layout):34s} {run.measured():7.2f} s measured; "
              f"{faster.name} {_shown(faster.layout)} {faster.measured():7.2f} s "
              f"({run.measured() / faster.measured():.2f}x; {_release(run)} then {_release(faster)})"
              f"{'' if not ok else '; within the planner anyway'}")
    if beaten or apart:
        kept = total - len(beaten) - len(apart)
        held = within - sum(ok for _, _, ok in beaten) - sum(ok for _, ok in apart)
        print(f"{held} of the other {kept} ({held / kept:.1%}) within {PLAN_SLACK - 1:.0%} of the planner's best")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="store_true")
    args = parser.parse_args()
    table()
    if args.plan:
        print()
        against_plan()
