"""Our lax.scan LSTM (ptm_jax/models/lstm.py) against torch.nn.LSTM at the same shapes, forward + backward, in
one run with the two sides interleaved (the LSTM speed ratio against PyTorch).

Each side computes d(sum of outputs)/d(inputs, weights) of one LSTM layer over [batch, time, input] float32
inputs from a zero state; ptm_jax under ``jax.jit`` (compiled before timing), PyTorch eager (its CPU LSTM
kernel, ``torch.nn.LSTM``, ``batch_first=True``). Both on the same threads: torch.set_num_threads(threads) and
XLA:CPU's intra-op thread pool capped to ``threads`` (``--xla_cpu_multi_thread_eigen`` +
``intra_op_parallelism_threads``), and the process pinned to the first ``threads`` cores when the machine has
more. Rounds alternate jax, torch, jax, torch, ... so load drifts hit both; the figure is each side's median
round, and the ratio of the medians.

    python benchmarks/lstm_vs_torch.py --rounds 15                      # the shapes in SHAPES
    python benchmarks/lstm_vs_torch.py --batch 32 --time 70 --input 400 --hidden 1150
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=3, help="forward+backward calls per timed round")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--time", type=int)
    ap.add_argument("--input", type=int)
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--proj", type=int, default=0, help="LSTMP projection size (0: none)")
    ap.add_argument("--out", help="write the results as JSON here")
    return ap.parse_args()


SHAPES = [  # (batch, time, input, hidden, proj)
    (32, 70, 400, 1150, 0),     # an AWD-LSTM layer (Merity et al. 2018: 400 embedding, 1150 hidden, BPTT 70)
    (64, 20, 256, 1024, 256),   # a small ELMo layer: LSTMP, bilm-tf's unroll of 20
    (32, 35, 128, 128, 0),      # a small LSTM: per-step overhead dominates
]


def main() -> None:
    args = parse()
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=true "
                               f"intra_op_parallelism_threads={args.threads}")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() > args.threads:
        os.sched_setaffinity(0, set(range(args.threads)))
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from ptm_jax.models.lstm import lstm_scan

    torch.set_num_threads(args.threads)
    shapes = SHAPES if args.batch is None else [(args.batch, args.time, args.input, args.hidden, args.proj)]
    results = []
    for B, T, D, H, P in shapes:
        torch.manual_seed(0)
        net = torch.nn.LSTM(D, H, batch_first=True, proj_size=P)
        x_t = torch.randn(B, T, D, requires_grad=True)
        g = lambda n, net=net: getattr(net, n).detach().numpy().T
        weights = {"kernel": g("weight_ih_l0"), "recurrent_kernel": g("weight_hh_l0"),
                   "bias": (net.bias_ih_l0 + net.bias_hh_l0).detach().numpy()}
        if P:
            weights["projection"] = g("weight_hr_l0")
        weights = {k: jnp.asarray(v) for k, v in weights.items()}
        x_j = jnp.asarray(x_t.detach().numpy())

        grad = jax.jit(jax.grad(lambda w, x: lstm_scan(w, x)[0].sum(), argnums=(0, 1)))
        jax.block_until_ready(grad(weights, x_j))            # compile

        def run_jax(grad=grad, weights=weights, x_j=x_j):
            for _ in range(args.steps):
                out = grad(weights, x_j)
            jax.block_until_ready(out)

        def run_torch(net=net, x_t=x_t):
            for _ in range(args.steps):
                net.zero_grad()
                x_t.grad = None
                net(x_t)[0].sum().backward()

        run_torch()
        # the outputs agree (same weights): a check that both sides compute the same thing
        y_t = net(x_t)[0].detach().numpy()
        y_j = np.asarray(jax.jit(lambda w, x: lstm_scan(w, x)[0])(weights, x_j))
        err = float(np.abs(y_t - y_j).max())
        times = {"jax": [], "torch": []}
        for _ in range(args.rounds):
            for name, fn in (("jax", run_jax), ("torch", run_torch)):
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) / args.steps)
        med = {k: float(np.median(v)) for k, v in times.items()}
        row = {"batch": B, "time": T, "input": D, "hidden": H, "proj": P, "max_abs_output_diff": err,
               "jax_ms": 1e3 * med["jax"], "torch_ms": 1e3 * med["torch"], "jax_over_torch": med["jax"] / med["torch"]}
        results.append(row)
        print(json.dumps(row), flush=True)
    info = {"threads": args.threads, "rounds": args.rounds, "steps": args.steps, "jax": jax.__version__,
            "torch": torch.__version__, "load_average": os.getloadavg(), "results": results}
    print(f"\n{'shape (B,T,D,H,P)':>26} {'ptm_jax ms':>11} {'torch ms':>9} {'ratio':>6}")
    for r in results:
        shape = f"({r['batch']},{r['time']},{r['input']},{r['hidden']},{r['proj']})"
        print(f"{shape:>26} {r['jax_ms']:11.1f} {r['torch_ms']:9.1f} {r['jax_over_torch']:6.2f}")
    print(f"load average at the end: {info['load_average']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(info, f, indent=2)


if __name__ == "__main__":
    main()
