#!/usr/bin/env python
"""Scale sweep of chapter 4's COBA-HH network: writes a scaling data file (checked by
validate_scaling below; the book stores none: simulated-CPU seconds are not hardware).

    python lab/coba_sweep.py --scales 1 10 100 1000 10000 30000 60000 \
        --out book/data/coba_scaling.json --time-budget 60
    python lab/coba_sweep.py --regimes --seeds 4 --sim-ms 2100 \
        --out book/data/coba_regimes.json

The second form measures the activity regime (rate, CV of ISIs, Fano factor of the
population count) of the benchmark as published and of the book's fixed in-degree
variant, 2 s after a 100 ms transient, for several seeds on one device: chapter 4
derives its bounds from it.

Scale 1 is 4200 neurons (3360 E + 840 I) with 80 inputs per neuron; scale s has 4200 s
neurons and the same in-degree.  Every size runs on all devices JAX finds (all GPUs; on
CPU, $BOOK_NUM_DEVICES simulated devices), with exactly the model code of the book
(shardbook/coba/, index connectivity split along the neuron axis).

Each size runs in its own child process, so that its peak device memory
(memory_stats()['peak_bytes_in_use']) is its own and an out-of-memory crash ends one
size, not the sweep.  The parent process never starts JAX, so it holds no GPU memory.
Before a size, the ledger of chapter 4 predicts its peak bytes per device, scaled by the
worst measured/predicted ratio seen so far; the sweep stops BEFORE a size predicted not
to fit the device's memory limit (memory_stats()['bytes_limit']).  --time-budget bounds
the steady-state running time per size (at least one chunk always runs), and the child
process is killed after 4x that plus 15 min.

The file records, per size: neurons, connectivity bytes per device, peak device memory,
compile time, steady-state seconds per simulated second and the spike rate; and once:
device kind and count, driver (nvidia-smi), jax/jaxlib/brainpy/brainstate/brainevent
versions, the date and the exact command.  It is rewritten after every size, so a
partial sweep is kept.

CPU runs: simulated CPU devices are not hardware measurements.  Writing a CPU sweep
under book/ is refused unless --allow-cpu is given, and the file says "simulated": true.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import provenance  # noqa: E402  (lab/provenance.py)

from shardbook import book, child  # noqa: E402  (neither starts JAX)

SCHEMA = "shardbook.coba-scaling/1"
REGIME_SCHEMA = "shardbook.coba-regimes/1"
# name: what build() needs; the benchmark as published, and the book's variant
VARIANTS = {
    "benchmark": dict(graph="bernoulli", start="random", sizes=(3200, 800)),
    "fixed in-degree": dict(graph="fixed", start="rest", sizes=(3360, 840)),
}


def device_memory() -> dict:
    """The largest ``peak_bytes_in_use`` and the smallest ``bytes_limit`` over this
    process's devices, from ``device.memory_stats()``; ``{}`` where the platform reports
    none (CPU)."""
    import jax

    stats = []
    for d in jax.local_devices():
        try:
            s = d.memory_stats()
        except Exception:
            s = None
        if s:
            stats.append(s)
    out = {}
    peaks = [s["peak_bytes_in_use"] for s in stats if "peak_bytes_in_use" in s]
    limits = [s["bytes_limit"] for s in stats if "bytes_limit" in s]
    if peaks:
        out["peak_bytes_in_use"] = int(max(peaks))
    if limits:
        out["bytes_limit"] = int(min(limits))
    return out


def measure_size(scale: float, sim_ms: float = 1000.0, chunk_ms: float = 10.0,
                 time_budget: float = 60.0) -> dict:
    """Build, compile and run one size on all devices; what the sweep records.

    Runs chunks of ``chunk_ms`` until ``sim_ms`` is simulated or ``time_budget`` seconds
    of steady-state running are spent (at least one chunk always runs).
    """
    import jax

    from shardbook import coba, shards

    devs = jax.devices()
    n_exc, n_inh = coba.sizes(scale)
    steps = int(round(chunk_ms / coba.DT))
    t0 = time.perf_counter()
    net = coba.build(devs, scale=scale, conn="index")  # the sweep measures the index
    jax.block_until_ready([shards.as_jax(v) for v in net.vars().values()])
    build_s = time.perf_counter() - t0
    sim = coba.Simulation(net, record=("count",))
    sim.compile(steps)
    chunks, run_s = 0, 0.0
    while True:
        _, dt = sim.timed_run(steps)
        chunks, run_s = chunks + 1, run_s + dt
        if chunks * chunk_ms >= sim_ms or run_s + dt > time_budget:
            break
    spikes = sum(
        int(np.asarray(c.value, dtype=np.int64).sum()) for c in sim.counts.values()
    )
    simulated_s = chunks * chunk_ms * 1e-3
    mem = device_memory()
    stats = coba.compiled_stats(sim.compiled[steps])
    return dict(
        scale=scale,
        neurons=n_exc + n_inh,
        n_exc=n_exc,
        n_inh=n_inh,
        devices=len(devs),
        conn="index",
        synapses=coba.SYNAPSES_PER_NEURON * (n_exc + n_inh),
        conn_bytes_per_device=coba.measured_bytes(net)["connectivity"],
        predicted_peak_bytes_per_device=int(
            coba.fit_bytes_per_device(n_exc + n_inh, len(devs))
        ),
        compiled_peak_bytes_per_device=stats["peak"],
        peak_bytes_in_use=mem.get("peak_bytes_in_use"),
        bytes_limit=mem.get("bytes_limit"),
        build_s=build_s,
        compile_s=sim.compile_s[steps],
        steady_s=run_s,
        simulated_s=simulated_s,
        steady_s_per_sim_s=run_s / simulated_s,
        rate_hz=spikes / (n_exc + n_inh) / simulated_s,
    )


def validate_scaling(data: dict) -> dict:
    """Check a scaling data file's structure; raises ``ValueError`` naming what is
    missing."""
    if data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} file (schema={data.get('schema')!r})")
    prov = data.get("provenance", {})
    need = ["device_kind", "device_count", "platform", "simulated", "versions", "date",
            "command"]
    missing = [k for k in need if k not in prov]
    for pkg in ("jax", "jaxlib", "brainpy", "brainstate", "brainevent"):
        if pkg not in prov.get("versions", {}):
            missing.append(f"versions.{pkg}")
    run_keys = ["neurons", "devices", "conn_bytes_per_device", "peak_bytes_in_use",
                "compile_s", "steady_s_per_sim_s", "rate_hz"]
    for i, run in enumerate(data.get("runs", [])):
        missing += [f"runs[{i}].{k}" for k in run_keys if k not in run]
    if missing:
        raise ValueError("scaling data file lacks: " + ", ".join(missing))
    return data


def measure_regime(variant: str, seed: int = 0, sim_ms: float = 2100.,
                   transient_ms: float = 100., window_ms: float = 500.,
                   devices=None) -> dict:
    """Run one variant on ``devices`` (default: the first device) and return its regime
    statistics after the transient: over the whole run, and per window of
    ``window_ms``."""
    import jax

    from shardbook import coba

    devs = jax.devices()[:1] if devices is None else devices
    net = coba.build(devs, seed=seed, **VARIANTS[variant])
    sim = coba.Simulation(net, record=("spike",))
    steps, cut = int(round(sim_ms / coba.DT)), int(round(transient_ms / coba.DT))
    out = sim.run(steps)
    spikes = np.concatenate([np.asarray(out[f"{p}.spike"]) for p in ("E", "I")], axis=1)
    finite = all(
        bool(np.isfinite(np.asarray(p.V.value)).all()) for p in net.populations.values()
    )
    after = spikes[cut:]
    per = int(round(window_ms / coba.DT))
    windows = [
        coba.regime(after[i : i + per]) for i in range(0, after.shape[0] - per + 1, per)
    ]
    return dict(variant=variant, seed=seed, neurons=spikes.shape[1], sim_ms=sim_ms,
                transient_ms=transient_ms, window_ms=window_ms, finite=finite,
                whole=coba.regime(after), windows=windows)


def measure_one(args) -> None:
    """Measure one size in this process and print one JSON line."""
    book.setup_devices(verbose=False)
    from shardbook import coba

    out = dict(provenance=provenance.provenance(args.command), memory=device_memory())
    count = out["provenance"]["device_count"]
    out["predicted"] = {str(s): coba.fit_bytes_per_device(sum(coba.sizes(s)), count)
                        for s in args.all_scales}
    out["run"] = measure_size(args.one, sim_ms=args.sim_ms, chunk_ms=args.chunk_ms,
                              time_budget=args.time_budget)
    child.answer(out)   # one marked JSON line (shardbook.child)


def in_process(args, scale: float) -> dict:
    book.setup_devices(verbose=False)
    from shardbook import coba

    out = dict(provenance=provenance.provenance(args.command))
    count = out["provenance"]["device_count"]
    out["predicted"] = {str(s): coba.fit_bytes_per_device(sum(coba.sizes(s)), count)
                        for s in args.scales}
    out["run"] = measure_size(scale, sim_ms=args.sim_ms, chunk_ms=args.chunk_ms,
                              time_budget=args.time_budget)
    out["memory"] = device_memory()
    return out


def run_child(args, scale: float) -> dict:
    """One size in a child process that sees the devices this process would see."""
    args_ = ["--one", repr(scale), "--all-scales", *map(repr, args.scales),
             "--sim-ms", repr(args.sim_ms), "--chunk-ms", repr(args.chunk_ms),
             "--time-budget", repr(args.time_budget), "--command", args.command]
    env = child.clean_env(keep=("JAX_*", "XLA_*", "BOOK_NUM_DEVICES"))
    try:
        return child.run(str(Path(__file__).resolve()), *args_, env=env,
                                  timeout=4 * args.time_budget + 900, cwd=ROOT,
                                  name=f"scale {scale}")
    except child.ChildError as e:
        return dict(error=str(e))


def regimes(args) -> int:
    """The activity regime of both variants, several seeds, on one device."""
    book.setup_devices(verbose=False)
    data = dict(schema=REGIME_SCHEMA, provenance=provenance.provenance(args.command),
                runs=[])
    for variant in VARIANTS:
        for seed in range(args.seeds):
            t0 = time.time()
            run = measure_regime(variant, seed, sim_ms=args.sim_ms)
            data["runs"].append(run)
            w = run["whole"]
            print(f"[regimes] {variant}, seed {seed}: {w['rate']:.1f} Hz, "
                  f"CV {w['cv']:.2f}, "
                  f"Fano {w['fano']:.1f} ({time.time() - t0:.0f} s)", flush=True)
            write(args.out, data)
    return 0


def write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", type=float, nargs="+",
                    help="sizes to run, in units of 4200 neurons")
    ap.add_argument("--out", type=Path,
                    help="the data file to write, e.g. book/data/coba_scaling.json")
    ap.add_argument("--time-budget", type=float, default=60.0,
                    help="steady-state seconds per size (default 60)")
    ap.add_argument("--sim-ms", type=float, default=1000.0,
                    help="simulated ms per size at most (default 1000)")
    ap.add_argument("--chunk-ms", type=float, default=10.0,
                    help="simulated ms per compiled call (default 10)")
    ap.add_argument("--in-process", action="store_true",
                    help="no child processes (quick CPU tests)")
    ap.add_argument("--allow-cpu", action="store_true",
                    help="allow writing a simulated-CPU sweep under book/")
    ap.add_argument("--regimes", action="store_true",
                    help="instead: regime statistics of both variants "
                         "(one device, --seeds seeds)")
    ap.add_argument("--seeds", type=int, default=4,
                    help="seeds per variant for --regimes")
    ap.add_argument("--one", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--all-scales", type=float, nargs="*", default=[],
                    help=argparse.SUPPRESS)
    ap.add_argument("--command", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.one is not None:
        measure_one(args)
        return 0
    if args.regimes:
        if args.out is None:
            ap.error("--out is required")
        args.command = "python lab/coba_sweep.py " + " ".join(
            shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
        return regimes(args)
    if not args.scales or args.out is None:
        ap.error("--scales and --out are required")
    args.scales = sorted(args.scales)
    args.command = "python lab/coba_sweep.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    out_path = args.out if args.out.is_absolute() else Path.cwd() / args.out

    data = dict(schema=SCHEMA, provenance=None, runs=[],
                stopped=None)
    ratio, limit = 1.0, None
    for scale in args.scales:
        t0 = time.time()
        if data["runs"] and limit:
            predicted = data["predicted_peak_bytes_per_device"][str(scale)] * ratio
            if predicted > limit:
                data["stopped"] = dict(scale=scale, reason=(
                    f"predicted peak {predicted / 1e9:.2f} GB per device (ledger x "
                    f"{ratio:.2f}, the worst measured/predicted ratio so far) exceeds "
                    f"the device limit {limit / 1e9:.2f} GB"))
                print(f"[sweep] stop before scale {scale}: {data['stopped']['reason']}",
                      flush=True)
                break
        res = in_process(args, scale) if args.in_process else run_child(args, scale)
        if "error" in res:
            data["stopped"] = dict(scale=scale, reason=res["error"])
            print(f"[sweep] scale {scale} failed: {res['error']}", flush=True)
            write(out_path, data)
            break
        prov = res["provenance"]
        if data["provenance"] is None:
            data["provenance"] = prov
            data["predicted_peak_bytes_per_device"] = res["predicted"]
            under_book = (ROOT / "book") in out_path.resolve().parents
            if prov["simulated"] and not args.allow_cpu and under_book:
                print("[sweep] refusing to write simulated-CPU numbers under book/ "
                      "(use --allow-cpu, or write elsewhere): they are not hardware "
                      "measurements", file=sys.stderr)
                return 2
        run = res["run"]
        limit = res.get("memory", {}).get("bytes_limit") or limit
        measured = run.get("peak_bytes_in_use")
        if measured:
            ratio = max(ratio, measured / run["predicted_peak_bytes_per_device"])
        data["runs"].append(run)
        write(out_path, data)
        peak = measured if measured is not None else "n/a"
        print(f"[sweep] scale {scale}: {run['neurons']:,} neurons on {run['devices']} "
              f"device(s), compile {run['compile_s']:.1f} s, "
              f"{run['steady_s_per_sim_s']:.2f} s per simulated s, "
              f"{run['rate_hz']:.1f} Hz, peak {peak} B "
              f"({time.time() - t0:.0f} s)", flush=True)
    write(out_path, data)
    print(f"[sweep] wrote {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
