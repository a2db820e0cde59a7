#!/usr/bin/python3
"""Checks the example scripts on small models, in Python alone (no headroom build): exports resnet18 at
32x32 and a tiny decoder into a temporary folder, then

  - step: a data file made here as headroom's C++ test makes it (input, target, param.N) compares
    equal to PyTorch's own full-batch step when it holds that step's weights, within 1e-5 when it holds
    a step done in two uneven micro-batches weighted b_i/B (what headroom's plan runs), and fails when
    one weight is perturbed;
  - peak: the profiler's memory events agree with each other and the peak holds at least the data;
  - loop: reports a positive samples/s;
  - bad arguments and inputs: exit 2 with one line on stderr.

Prints one line per check and `N passed, N failed` last; exits 1 when any failed (77: no torch).
About a minute on two cores.
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

torch = common.require_torch("self_test.py")
import torch.nn.functional as F  # noqa: E402

results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def run(*args):
    return subprocess.run([sys.executable] + list(args), capture_output=True, text=True)


def step_script(*args):
    done = run(os.path.join(HERE, "pytorch_step.py"), *args)
    return done.returncode, done.stdout, done.stderr


def reference_modes(model):
    """What pytorch_step.py's step does: training mode, BatchNorm and dropout in eval mode."""
    model.train()
    for module in model.modules():
        if module.original_name.startswith(("BatchNorm", "Dropout")) or module.original_name == "MultiheadAttention":
            module.eval()


def headroom_like_step(path, x, target, optimizer_name, splits):
    """One optimizer step as headroom's plan runs it: micro-batches of the given sizes, each mean loss
    weighted b_i/B, gradients accumulated, one step. Returns the weights after it and the gradients."""
    model = torch.jit.load(path)
    reference_modes(model)
    params = list(model.parameters())
    optimizer = (torch.optim.SGD(params, lr=0.01, momentum=0.9) if optimizer_name == "sgd"
                 else torch.optim.Adam(params, lr=1e-3))
    batch, start = x.shape[0], 0
    for size in splits:
        out = model(x[start:start + size])
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), target[start:start + size].reshape(-1))
        (loss * (size / batch)).backward()
        start += size
    grads = [p.grad.detach().clone() for p in params]
    optimizer.step()
    return [p.detach().clone() for p in params], grads


def save_data(path, x, target, params, grads=()):
    data = {"input": x, "target": target}
    data.update({f"param.{i}": p for i, p in enumerate(params)})
    data.update({f"grad.{i}": g for i, g in enumerate(grads)})
    torch.save(data, path)


def main():
    with tempfile.TemporaryDirectory(prefix="headroom-examples-") as tmp:
        done = run(os.path.join(HERE, "export_torchvision.py"), "--out", tmp, "--models", "resnet18,decoder",
                   "--image-size", "32", "--vocab", "512", "--seq", "16", "--d-model", "64", "--layers", "2")
        check("export resnet18 (32x32) and a tiny decoder", done.returncode == 0, done.stderr.strip()[-300:])
        if done.returncode != 0:
            return
        # A language model's classes are its output's last dimension, an image classifier's its second.
        cases = {
            "resnet18": ("3x32x32:float32", torch.randn(6, 3, 32, 32), torch.randint(0, 1000, (6,)), "cross-entropy"),
            "decoder": ("16:int64:0-512", torch.randint(0, 512, (6, 16)), torch.randint(0, 512, (6, 16)),
                        "cross-entropy-last"),
        }
        for name, (spec, x, target, loss) in cases.items():
            model = os.path.join(tmp, name + ".pt")
            for optimizer in ("sgd", "adam"):
                data = os.path.join(tmp, "data.pt")
                for label, splits in (("itself", [6]), ("micro-batched 4+2", [4, 2])):
                    save_data(data, x, target, *headroom_like_step(model, x, target, optimizer, splits))
                    rc, out, err = step_script("step", "--model", model, "--data", data, "--loss", loss,
                                               "--optimizer", optimizer)
                    result = json.loads(out) if rc == 0 else {}
                    diff, grad = result.get("max_rel_diff"), result.get("max_rel_diff_grad")
                    if label == "itself":
                        ok = diff == 0.0 and grad == 0.0
                    elif optimizer == "sgd":
                        ok = diff is not None and diff <= 1e-5 and grad is not None and grad <= 1e-5
                    else:
                        # Adam's first step normalizes each gradient element by its own size, so elements
                        # that are zero but for rounding differ fully (see pytorch_step.py): the gradients
                        # are held to 1e-5, the weights only reported.
                        ok = grad is not None and grad <= 1e-5
                    check(f"step {name} {optimizer} against {label}", ok,
                          f"max_rel_diff {diff} ({result.get('worst_parameter')}), grad {grad}" if rc == 0 else err.strip())
                # One weight off by 1e-3 of its tensor's largest: the comparison must see it.
                params, _ = headroom_like_step(model, x, target, optimizer, [6])
                params[0].view(-1)[0] += 1e-3 * params[0].abs().max()
                save_data(data, x, target, params)
                rc, out, err = step_script("step", "--model", model, "--data", data, "--loss", loss,
                                           "--optimizer", optimizer)
                diff = json.loads(out)["max_rel_diff"] if rc == 0 else None
                check(f"step {name} {optimizer} sees a perturbed weight", diff is not None and diff > 1e-5,
                      f"max_rel_diff {diff}")

            rc, out, err = step_script("peak", "--model", model, "--input", spec, "--batch", "4", "--optimizer", "adam",
                                       "--loss", loss)
            result = json.loads(out) if rc == 0 else {}
            check(f"peak {name}", rc == 0 and result["consistent"] and result["step_peak_bytes"] > result["data_bytes"] > 0,
                  f"step peak {result.get('step_peak_bytes')} B, static {result.get('static_bytes')} B" if rc == 0
                  else err.strip())
            rc, out, err = step_script("loop", "--model", model, "--input", spec, "--batch", "4", "--steps", "3",
                                       "--loss", loss,
                                       "--warmup", "1", "--threads", "1")
            result = json.loads(out) if rc == 0 else {}
            check(f"loop {name}", rc == 0 and result["samples_per_second"] > 0,
                  f"{result.get('samples_per_second', 0):.1f} samples/s" if rc == 0 else err.strip())

        resnet = os.path.join(tmp, "resnet18.pt")
        not_torchscript = os.path.join(tmp, "resnet18.json")
        save_data(os.path.join(tmp, "short.pt"), x, target, [])
        bad = [
            (["peak", "--model", not_torchscript, "--input", "3x32x32:float32", "--batch", "2"], "not TorchScript"),
            (["peak", "--model", resnet, "--input", "3x32:float32", "--batch", "2"], "a shape that does not fit"),
            (["peak", "--model", resnet, "--input", "3x32x32:float16", "--batch", "2"], "an unsupported dtype"),
            (["peak", "--model", resnet, "--input", "3x32x32:int64", "--batch", "2"], "integers with no range"),
            (["peak", "--model", resnet, "--input", "3x32x32:float32", "--batch", "0"], "batch 0"),
            (["loop", "--model", resnet, "--input", "3x32x32:float32", "--batch", "2", "--steps", "x"], "steps x"),
            (["step", "--model", resnet, "--data", os.path.join(tmp, "short.pt"), "--loss", "mse",
              "--optimizer", "sgd"], "a data file without the parameters"),
            (["step", "--model", resnet, "--data", resnet, "--loss", "mse", "--optimizer", "sgd"], "a model as data"),
            (["frobnicate"], "an unknown subcommand"),
        ]
        for args, what in bad:
            rc, out, err = step_script(*args)
            lines = err.strip().splitlines()
            check(f"refuses {what}", rc == 2 and len(lines) == 1, f"exit {rc}: {err.strip()}")


if __name__ == "__main__":
    main()
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
