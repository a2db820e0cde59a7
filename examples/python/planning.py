"""What the examples and the overhead bench do with headroom before training: profile the model
(or read its trace) and plan the batch at a fraction of what it needs whole."""

import headroom


def batch_sizes_up_to(batch):
    """The sizes the examples profile: powers of two up to 32, none above `batch`."""
    return [b for b in (1, 2, 4, 8, 16, 32) if b <= batch]


def profile_and_plan(model, inputs, args, precision="fp32", trace=None, profile_args=None, optimizer="adam"):
    """(the whole batch's need in bytes, the plan at args.fraction of it), profiling the model at
    batch sizes up to args.batch unless a trace is given; `profile_args`: what else profile takes
    (models.build's fourth element), `optimizer` the one the loop trains with."""
    if trace is None:
        trace = headroom.profile(model, inputs, batch_sizes=batch_sizes_up_to(args.batch),
                                 threads=args.threads, repeats=3, timing_seconds=args.timing_seconds,
                                 precision=precision, optimizer=optimizer,
                                 **(profile_args or {}))
    need = headroom.plan(trace, budget="1TiB", batch=args.batch, strategies="none").predicted_peak_bytes
    return need, headroom.plan(trace, budget=int(args.fraction * need), batch=args.batch)
