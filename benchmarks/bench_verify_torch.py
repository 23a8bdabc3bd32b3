"""Batched torch chain verification on the CPU: batch 64, gamma 8, vocab 32k, time per round."""

from __future__ import annotations

import torch

from benchmarks.record import record
from measure.timing import time_fn
from measure.verification import verify_chain


def main() -> None:
    torch.manual_seed(0)
    B, g, V = 64, 8, 32000
    p = torch.softmax(torch.randn(B, g + 1, V, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(B, g, V, dtype=torch.float64), -1)
    x = torch.multinomial(q.reshape(-1, V), 1).reshape(B, g)
    rows = []
    for validate, syncs in ((False, 0), (True, 1)):
        t = time_fn(lambda v=validate: verify_chain(p, q, x, validate=v), warmup=3, repeats=30)
        rows.append(
            f"| validate={validate} | {syncs} | {t.median_s * 1e3:.2f} | {t.q25_s * 1e3:.2f}-{t.q75_s * 1e3:.2f} |"
        )
    body = (
        f"`measure.verification.verify_chain`, batch {B}, gamma {g}, vocab {V}, float64, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; median of 30 after 3 warm-ups (`measure.timing`).\n\n"
        "| mode | host syncs per round | median ms | IQR ms |\n|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        "No Python loop over the batch; the only host sync is the optional check that every proposed token had q > 0.\n"
    )
    record("torch chain verification (CPU)", body, "python -m benchmarks.bench_verify_torch")


if __name__ == "__main__":
    main()
