"""Load on the predictor service: concurrent clients, latency, throughput and memory.

    python benchmarks/service_load.py [--duration 180] [--clients 8,32,64] [--max-keys 200000]

For each client count and key mode (``fixed``: every client cycles over its own 256 keys;
``fresh``: every round uses 256 keys never seen before) the clients run for ``--duration``
seconds, each round one ``/observe`` of 256 observations and one ``/predict`` of the same
256 keys. Reported: predict latency p50/p99, rounds per second, errors and 503s, and the
service's RSS (start, max, end; a fresh-key run must plateau once ``--max-keys`` is
reached). Throughout, a probe measures ``/health`` latency, and with ``--big`` one client
also sends a 16 MiB ``/observe`` (1M observations) whenever the previous one is done, so
the service always has one in flight. With ``--async-client`` one more client drives an
``AsyncPredictor(RemotePredictor)`` like a cache does and reports its dropped observations.

The service runs as a separate ``lcr serve-predictor`` process; its RSS (front plus model
process, from /proc) and the machine's load average are sampled every second. On a shared
machine, ``--nice-clients 10`` runs the load generators (clients, probe, big sender, async
client) at a lower priority than the service. Writes its ``--setting``'s entry of benchmarks/results/service_load.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from results_file import update_entry

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from lcr.predict.http_client import CallFailed, ConnectionPool, Endpoint  # noqa: E402
from lcr.predict.wire import CONTENT_TYPE, encode_int64, encode_observations  # noqa: E402
from ports import free_port  # noqa: E402  (tests/)

RESULTS = ROOT / "benchmarks" / "results" / "service_load.json"
KEYS_PER_ROUND = 256
HEADERS = {"Content-Type": CONTENT_TYPE}


def rss_mb(*pids: int) -> float:
    """Resident memory of these processes together (Linux /proc)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
        except (OSError, StopIteration):
            return float("nan")
    return total


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return float("nan")


def service_pids(url: str, pid: int) -> tuple[int, int]:
    """The front's pid and its model process's pid."""
    pool = ConnectionPool(Endpoint(url), size=1)
    metrics = json.loads(pool.call("GET", "/metrics", {}, b"", time.monotonic() + 30)[1])
    pool.close()
    return (pid, metrics["model_pid"]) if "model_pid" in metrics else (pid,)  # older services: one process


def start_service(port: int, max_keys: int, features: str = "full", root: Path = ROOT) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(root)}
    # The service's log goes to a file: an unread pipe would fill up and block it.
    log = open(RESULTS.parent / f"service_load.{port}.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "lcr", "serve-predictor", "--port", str(port),
                             "--max-keys", str(max_keys), "--features", features],
                            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)  # -m looks in cwd first
    proc.log = log
    pool = ConnectionPool(Endpoint(f"http://127.0.0.1:{port}"))
    deadline = time.monotonic() + 120  # the model process imports LightGBM first
    while True:
        try:
            if pool.call("GET", "/health", {}, b"", time.monotonic() + 1)[0] == 200:
                return proc
        except CallFailed:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            raise RuntimeError(f"service did not start: {log.read()[-500:]}")
        time.sleep(0.1)


def percentile_ms(samples: list[float], q: float) -> float:
    return float(np.percentile(samples, q) * 1e3) if samples else float("nan")


def _client_loop(url: str, index: int, mode: str, stop_at: float, out: list) -> None:
    pool = ConnectionPool(Endpoint(url), size=2)
    base = (index + 1) << 40
    fixed = np.arange(base, base + KEYS_PER_ROUND, dtype=np.int64)
    t = counter = rounds = errors = busy = 0
    latencies, samples = [], []
    while time.monotonic() < stop_at:
        if mode == "fixed":
            keys = fixed
        else:
            keys = np.arange(base + counter, base + counter + KEYS_PER_ROUND, dtype=np.int64)
            counter += KEYS_PER_ROUND
        t += 1
        try:
            status, _ = pool.call("POST", "/observe", HEADERS, encode_observations(keys, np.full(len(keys), t)),
                                  time.monotonic() + 10)
            start = time.perf_counter()
            status2, _ = pool.call("POST", f"/predict?now={t}", HEADERS, encode_int64(keys), time.monotonic() + 10)
            latencies.append(time.perf_counter() - start)
            busy += (status == 503) + (status2 == 503)
            errors += (status not in (200, 503)) + (status2 not in (200, 503))
            rounds += 1
        except CallFailed as err:
            errors += 1
            samples.append(str(err))
    pool.close()
    out.append({"latencies": latencies, "rounds": rounds, "errors": errors, "busy": busy, "samples": samples[:3]})


def run_clients(url: str, indices: list[int], mode: str, stop_at: float) -> dict:
    """Several clients as threads of one process (the benchmark spreads them over processes)."""
    out: list = []
    threads = [threading.Thread(target=_client_loop, args=(url, i, mode, stop_at, out)) for i in indices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"latencies": [x for o in out for x in o["latencies"]],
            "error_samples": [x for o in out for x in o["samples"]][:5],
            **{k: sum(o[k] for o in out) for k in ("rounds", "errors", "busy")}}


def run_probe(url: str, stop_at: float) -> dict:
    pool = ConnectionPool(Endpoint(url), size=1)
    health = []
    while time.monotonic() < stop_at:
        start = time.perf_counter()
        try:
            status, _ = pool.call("GET", "/health", {}, b"", time.monotonic() + 10)
            health.append(time.perf_counter() - start if status == 200 else float("inf"))
        except CallFailed:
            health.append(float("inf"))
        time.sleep(0.02)
    return {"health": health}


def run_big(url: str, stop_at: float) -> dict:
    """Keep one 16 MiB /observe (1M observations) in flight: send the next when the last is done."""
    pool = ConnectionPool(Endpoint(url), size=1)
    n = 1 << 20
    body = encode_observations(np.arange(n, dtype=np.int64) + (1 << 50), np.full(n, 1))
    sent = 0
    while time.monotonic() < stop_at:
        try:
            status, _ = pool.call("POST", "/observe", HEADERS, body, time.monotonic() + 60)
            sent += status == 200
            while time.monotonic() < stop_at:  # answered once queued: wait for the lane to drain
                metrics = json.loads(pool.call("GET", "/metrics", {}, b"", time.monotonic() + 10)[1])
                if metrics["observe_queued"] == 0:
                    break
                time.sleep(0.05)
        except CallFailed:
            time.sleep(0.1)
    return {"big_sent": sent}


def run_async(url: str, stop_at: float, rate: float) -> dict:
    """A cache's use: AsyncPredictor(RemotePredictor), observe and submit on every access,
    ``rate`` accesses per second."""
    from lcr.predict.async_predictor import AsyncConfig, AsyncPredictor
    from lcr.predict.remote import RemotePredictor

    remote = RemotePredictor(url, deadline_s=0.05, flush_every=1024)
    predictor = AsyncPredictor(remote, AsyncConfig(max_pending=4096))
    rng = np.random.default_rng(0)
    observed = t = 0
    start = time.monotonic()
    while time.monotonic() < stop_at:
        for key in (rng.zipf(1.2, 64) % 100_000).tolist():
            predictor.observe(key, t)
            predictor.submit([key], t, lambda k, v: None)
            t += 1
            observed += 1
        time.sleep(max(0.0, start + observed / rate - time.monotonic()))
    predictor.drain(5)
    remote.flush()
    predictor.close()
    remote.close()
    m = remote.metrics
    return {"async_client": {"observed": observed, "dropped_observations": m["dropped_observations"],
                             "fallbacks": m["fallbacks"], "busy": m["busy"],
                             "dropped_share": m["dropped_observations"] / max(observed, 1)}}


def run_config(url: str, pid: int, clients: int, mode: str, duration: float, big: bool, async_client: bool,
               processes: int, async_rate: float = 5000.0, nice_clients: int = 0) -> dict:
    from concurrent.futures import ProcessPoolExecutor

    pids = service_pids(url, pid)
    groups = [list(range(clients))[i::processes] for i in range(min(processes, clients))]
    rss, load = [rss_mb(*pids)], [os.getloadavg()[0]]
    cpu = [cpu_seconds(p) for p in pids]
    # The load (clients, the big sender) may run niced; the probe and the async client
    # measure, so they run at normal priority, as the service does.
    with ProcessPoolExecutor(max_workers=len(groups) + 1, initializer=os.nice, initargs=(nice_clients,)) as load_pool, \
            ProcessPoolExecutor(max_workers=2) as measure_pool:
        stop_at = time.monotonic() + duration
        futures = [load_pool.submit(run_clients, url, g, mode, stop_at) for g in groups]
        futures.append(measure_pool.submit(run_probe, url, stop_at))
        if big:
            futures.append(load_pool.submit(run_big, url, stop_at))
        if async_client:
            futures.append(measure_pool.submit(run_async, url, stop_at, async_rate))
        while time.monotonic() < stop_at:
            time.sleep(1.0)
            rss.append(rss_mb(*pids))
            load.append(os.getloadavg()[0])
        cpu = [(cpu_seconds(p) - used) / duration for p, used in zip(pids, cpu)]
        parts = [f.result() for f in futures]
    latencies = [x for p in parts for x in p.get("latencies", [])]
    health = [x for p in parts for x in p.get("health", [])]
    rounds = sum(p.get("rounds", 0) for p in parts)
    row = {"clients": clients, "keys": mode, "duration_s": duration, "big_request": big, "rounds": rounds,
           "rounds_per_s": rounds / duration, "predict_p50_ms": percentile_ms(latencies, 50),
           "predict_p99_ms": percentile_ms(latencies, 99),
           "errors": sum(p.get("errors", 0) for p in parts),
           "error_samples": [x for p in parts for x in p.get("error_samples", [])][:5], "busy_503": sum(p.get("busy", 0) for p in parts),
           "big_requests_sent": sum(p.get("big_sent", 0) for p in parts),
           "health_samples": len(health), "health_p50_ms": percentile_ms(health, 50),
           "health_p99_ms": percentile_ms(health, 99), "health_max_ms": max(health) * 1e3 if health else None,
           "rss_mb_start": rss[0], "rss_mb_max": max(rss), "rss_mb_end": rss[-1], "rss_mb_series": rss,
           "load_avg_1m_mean": float(np.mean(load)), "load_avg_1m_max": max(load), "nice_clients": nice_clients,
           "front_cpu_share": cpu[0], "model_cpu_share": cpu[1] if len(cpu) > 1 else float("nan")}
    for p in parts:
        if "async_client" in p:
            row["async_client"] = p["async_client"]
    return row


def run_one(args, root: Path, clients: int, mode: str, repeat: int) -> dict:
    port = free_port()
    service = start_service(port, args.max_keys, args.features, root)  # a fresh service per configuration
    try:
        row = run_config(f"http://127.0.0.1:{port}", service.pid, clients, mode, args.duration,
                         args.big, args.async_client, args.processes, args.async_rate, args.nice_clients)
    finally:
        service.terminate()
        try:
            service.wait(10)
        except subprocess.TimeoutExpired:  # still busy with a 16 MiB batch
            service.kill()
            service.wait(10)
        service.log.close()
        os.unlink(service.log.name)
    row.update(service_root=str(root), repeat=repeat)
    extra = ""
    if "async_client" in row:
        a = row["async_client"]
        extra = f" async: {a['dropped_observations']}/{a['observed']} dropped ({a['dropped_share']:.3%})"
    print(f"{clients:>3} clients {mode:>5} [{root.name}]: {row['rounds_per_s']:8.1f} rounds/s  predict p50 "
          f"{row['predict_p50_ms']:6.1f} ms p99 {row['predict_p99_ms']:7.1f} ms  errors {row['errors']} "
          f"503s {row['busy_503']}  /health p50 {row['health_p50_ms']:.1f} p99 {row['health_p99_ms']:.1f} "
          f"max {row['health_max_ms']:.1f} ms  RSS {row['rss_mb_start']:.0f}->{row['rss_mb_max']:.0f}"
          f"->{row['rss_mb_end']:.0f} MB  big sent {row['big_requests_sent']}  load "
          f"{row['load_avg_1m_mean']:.1f} (max {row['load_avg_1m_max']:.1f})  CPU front "
          f"{row['front_cpu_share']:.0%} model {row['model_cpu_share']:.0%}{extra}", flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=180.0, help="seconds per configuration")
    parser.add_argument("--clients", default="8,32,64")
    parser.add_argument("--modes", default="fixed,fresh")
    parser.add_argument("--max-keys", type=int, default=200_000, help="the service's --max-keys")
    parser.add_argument("--big", action="store_true", help="keep one 16 MiB /observe in flight")
    parser.add_argument("--async-client", action="store_true", help="also run AsyncPredictor(RemotePredictor)")
    parser.add_argument("--async-rate", type=float, default=5000.0, help="accesses/s of the async client")
    parser.add_argument("--processes", type=int, default=4, help="client processes (clients spread over them)")
    parser.add_argument("--features", choices=("full", "compact"), default="full", help="the service's feature layout")
    parser.add_argument("--service-root", action="append", type=Path,
                        help="run the service from this source tree (repeat to compare trees, alternating)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each configuration")
    parser.add_argument("--nice-clients", type=int, default=0,
                        help="niceness of the load-generating processes (the service keeps its own)")
    parser.add_argument("--setting", default="load",
                        help="this run's entry in --out (load: the default grid; health: --big at 64 "
                             "clients; soak: a long fresh-key run); a re-run replaces its own entry")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    rows = []
    roots = args.service_root or [ROOT]
    for mode in args.modes.split(","):
        for clients in (int(c) for c in args.clients.split(",")):
            for repeat in range(args.repeats):
                for root in roots:  # alternating, so the trees see the same machine load
                    rows.append(run_one(args, root, clients, mode, repeat))
    update_entry(args.out, args.setting, {"args": vars(args), "cpu_count": os.cpu_count(), "runs": rows})
    print(f"wrote {args.out} ({args.setting})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
