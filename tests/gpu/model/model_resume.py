"""A real hybrid model resumes through leapcache: tiny random-weight Qwen3-Next and Kimi Linear
models (transformers' own code, linear-attention head dims 128, fixed seeds) prefill a prompt
once block by block; at every block boundary each linear layer's recurrent state and
short-convolution state go to a real leapcache-server through the Python client's data plane
(CUDA IPC where the service offers it), one namespace per storage format. A second run looks up
the deepest checkpoint at a chosen depth, takes the states from leapcache, keeps the attention
layers' KV of the first run up to that depth (as an engine's own prefix cache would), prefills
only the rest of the prompt and decodes 256 tokens, teacher-forced with the full recompute's
greedy tokens. Its logits are compared with the full recompute's and with the model's own resume
from the states in memory.

    python3 tests/gpu/model/model_resume.py --target HOST:PORT [--out results.md] [--quick]

Needs torch with CUDA and transformers (Qwen3NextForCausalLM, KimiLinearForCausalLM); nothing is
downloaded. Exit status 1 if the fp32 format's resume is not bit-identical to the model's own.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

import leapcache

BLOCK = 64
FORMATS = ("fp32", "bf16", "leap8", "leap6", "leap4")


# ---- the models ----

def qwen3_next(seed: int):
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
    cfg = Qwen3NextConfig(
        vocab_size=2048, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_conv_kernel_dim=4, num_experts=0,
        layer_types=["linear_attention"] * 3 + ["full_attention"])
    torch.manual_seed(seed)
    model = Qwen3NextForCausalLM(cfg)
    nk, nv, dk, dv = 2, 4, 128, 128
    # Conv channels [q: nk dk | k: nk dk | v: nv dv]; value head h shares key head h // r with
    # r - 1 others, so it takes its 1/r of that head's q and k channels and its own v channels.
    r = nv // nk
    share = dk // r
    perm = []
    for h in range(nv):
        g, j = h // r, h % r
        q0 = g * dk + j * share
        perm += list(range(q0, q0 + share))
        perm += list(range(nk * dk + q0, nk * dk + q0 + share))
        perm += list(range(2 * nk * dk + h * dv, 2 * nk * dk + (h + 1) * dv))
    return model, cfg, dict(kind="gdn", heads=nv, dk=dk, dv=dv, conv_dim=2 * nk * dk + nv * dv,
                            kernel=4, perm=perm)


def kimi_linear(seed: int):
    from transformers import KimiLinearConfig, KimiLinearForCausalLM
    cfg = KimiLinearConfig(
        vocab_size=2048, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=64, qk_rope_head_dim=32,
        qk_nope_head_dim=64, v_head_dim=64, linear_num_heads=4, linear_head_dim=128,
        linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "linear_attention", "full_attention",
                     "linear_attention"],
        mlp_layer_types=["dense"] * 4, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(seed)
    model = KimiLinearForCausalLM(cfg)
    H, d = 4, 128
    # One conv over [q: H d | k: H d | v: H d]; head h owns its d channels of each.
    perm = []
    for h in range(H):
        for part in range(3):
            perm += list(range(part * H * d + h * d, part * H * d + (h + 1) * d))
    return model, cfg, dict(kind="kda", heads=H, dk=d, dv=d, conv_dim=3 * H * d, kernel=4,
                            perm=perm)


MODELS = {"Qwen3-Next": qwen3_next, "Kimi Linear": kimi_linear}


# ---- states between the model's cache and leapcache's arrays ----

def linear_layers(cache):
    return [i for i, l in enumerate(cache.layers) if hasattr(l, "recurrent_states")]


def snapshot(cache):
    """Every layer's state, cloned (the cache updates its tensors in place)."""
    out = []
    for l in cache.layers:
        if hasattr(l, "recurrent_states"):
            out.append(("linear", l.conv_states[0].clone(), l.recurrent_states[0].clone()))
        else:
            out.append(("attention", l.keys.clone(), l.values.clone()))
    return out


def to_leapcache(snap, shape):
    """(states [layers, heads, dk, dv] fp32, conv [layers, heads, channels / heads, K - 1]) of
    the linear layers; the conv state keeps its newest K - 1 inputs (the oldest one no longer
    reaches any output)."""
    perm = torch.tensor(shape["perm"], device=snap[0][1].device)
    states, convs = [], []
    for kind, a, b in snap:
        if kind != "linear":
            continue
        states.append(b[0].float())
        c = a[0][:, 1:]  # [conv_dim, K - 1]
        convs.append(c[perm].reshape(shape["heads"], -1, shape["kernel"] - 1))
    return torch.stack(states).contiguous(), torch.stack(convs).contiguous()


def restored_cache(cfg, snap, states, convs, shape, m):
    """A fresh cache holding `states` and `convs` in the linear layers and the first m tokens of
    the snapshot's attention KV."""
    from transformers import DynamicCache
    cache = DynamicCache(config=cfg)
    perm = torch.tensor(shape["perm"], device=states.device)
    li = 0
    for layer, (kind, a, b) in zip(cache.layers, snap):
        if kind == "linear":
            conv = torch.zeros_like(a)
            conv[0, perm, 1:] = convs[li].reshape(-1, shape["kernel"] - 1).to(a.dtype)
            layer.conv_states[0] = conv
            layer.recurrent_states[0] = states[li].unsqueeze(0).to(b.dtype).clone()
            layer.conv_kernel_size[0] = a.shape[-1]
            layer.is_conv_states_initialized[0] = True
            layer.is_recurrent_states_initialized[0] = True
            layer.has_previous_state[0] = True
            layer.dtype, layer.device = a.dtype, a.device
            li += 1
        else:
            layer.lazy_initialization(a, b)
            layer.keys = a[..., :m, :].clone()
            layer.values = b[..., :m, :].clone()
    return cache


@torch.no_grad()
def decode(model, cache, suffix, forced):
    """Logits of the suffix's last token and of each teacher-forced decode step
    ([1 + len(forced), vocab], fp32)."""
    out = model(input_ids=suffix, past_key_values=cache, use_cache=True)
    logits = [out.logits[0, -1].float()]
    for t in forced[:-1]:
        out = model(input_ids=t.view(1, 1), past_key_values=cache, use_cache=True)
        logits.append(out.logits[0, -1].float())
    return torch.stack(logits)


def compare(logits, reference):
    err = (logits - reference).abs()
    scale = reference.abs().mean().item()
    agree = (logits.argmax(-1) == reference.argmax(-1)).float()
    return dict(max_abs=err.max().item(), mean_abs=err.mean().item(), logit_scale=scale,
                greedy_agreement=agree.mean().item(),
                first_disagreement=int((agree == 0).nonzero()[0].item())
                if (agree == 0).any() else None)


# ---- the run ----

def run_model(name, build, client, engine, args, rows):
    dev = torch.device("cuda", 0)
    model, cfg, shape = build(seed=7)
    model = model.to(dev, torch.float32).eval()
    n = args.blocks * BLOCK + 40
    gen = torch.Generator().manual_seed(11)
    prompt = torch.randint(3, cfg.vocab_size, (1, n), generator=gen).to(dev)
    chain = leapcache.chain_hashes(prompt[0].tolist(), BLOCK, salt=name)
    conv_shape = leapcache.ConvShape(shape["conv_dim"], shape["kernel"] - 1, "float32")
    namespaces = {f: engine.client.register_namespace(
        "model-resume-" + name.replace(" ", "-"), kind=shape["kind"],
        layers=len(linear_layers(_probe(cfg))),
        heads=shape["heads"], dk=shape["dk"], dv=shape["dv"], format=f, conv=conv_shape)
        for f in FORMATS}

    # Run 1: block by block, every boundary's states to every namespace.
    from transformers import DynamicCache
    cache = DynamicCache(config=cfg)
    snaps = {}
    put_seconds = 0.0
    with torch.no_grad():
        for b in range(args.blocks):
            model(input_ids=prompt[:, b * BLOCK:(b + 1) * BLOCK], past_key_values=cache,
                  use_cache=True)
            snap = snapshot(cache)
            snaps[b + 1] = snap
            states, convs = to_leapcache(snap, shape)
            t0 = time.perf_counter()
            for f, ns in namespaces.items():
                engine.put_from(ns, chain[b], states, conv=convs)
            put_seconds += time.perf_counter() - t0
        model(input_ids=prompt[:, args.blocks * BLOCK:], past_key_values=cache, use_cache=True)
    full_snap = snapshot(cache)  # the engine's own prefix cache: attention KV of all n tokens

    # The full recompute: one prefill of the whole prompt, greedy decode.
    ref_cache = DynamicCache(config=cfg)
    with torch.no_grad():
        out = model(input_ids=prompt, past_key_values=ref_cache, use_cache=True)
        tokens = [out.logits[0, -1].argmax()]
        ref_logits = [out.logits[0, -1].float()]
        for _ in range(args.decode - 1):
            out = model(input_ids=tokens[-1].view(1, 1), past_key_values=ref_cache,
                        use_cache=True)
            ref_logits.append(out.logits[0, -1].float())
            tokens.append(out.logits[0, -1].argmax())
    reference = torch.stack(ref_logits)
    forced = torch.stack(tokens)

    status = 0
    for depth in args.depths:
        m = depth * BLOCK
        suffix = prompt[:, m:]
        own_states, own_convs = to_leapcache(snaps[depth], shape)
        own = decode(model, restored_cache(cfg, full_snap, own_states, own_convs, shape, m),
                     suffix, forced)
        rows.append(dict(model=name, format="own resume (states in memory)", depth_tokens=m,
                         **compare(own, reference)))
        for f, ns in namespaces.items():
            hit = engine.client.lookup(ns, chain, max_depth=depth)
            assert hit and hit.blocks == depth, (f, depth, hit)
            states = torch.empty_like(own_states)
            convs = torch.empty_like(own_convs)
            t0 = time.perf_counter()
            info = engine.get_into(ns, hit.key, states, conv=convs)
            get_ms = (time.perf_counter() - t0) * 1e3
            assert torch.equal(convs, own_convs), f"{f}: conv states differ from those put"
            logits = decode(model, restored_cache(cfg, full_snap, states, convs, shape, m),
                            suffix, forced)
            row = dict(model=name, format=f, depth_tokens=m, get_ms=get_ms,
                       state_rel_err=((states - own_states).norm() /
                                      own_states.norm()).item(),
                       **compare(logits, reference))
            row["vs_own_resume_max_abs"] = (logits - own).abs().max().item()
            rows.append(row)
            if f == "fp32" and not torch.equal(logits, own):
                print(f"FAIL {name} depth {m}: the fp32 format's resume differs from the "
                      f"model's own by {row['vs_own_resume_max_abs']:.3g}", file=sys.stderr)
                status = 1
    rows.append(dict(model=name, format="(puts)", depth_tokens=args.blocks * BLOCK,
                     put_seconds=put_seconds, transport=engine.transport))
    return status


def _probe(cfg):
    from transformers import DynamicCache
    return DynamicCache(config=cfg)


def _num(row, key, spec):
    return format(row[key], spec) if key in row else ""


def markdown(rows, args):
    lines = [f"Prompt: {args.blocks * BLOCK + 40} random tokens, checkpoints every {BLOCK} "
             f"tokens, {args.decode} decode steps teacher-forced with the full recompute's greedy "
             "tokens; logit errors against the full recompute (fp32 model).", "",
             "| model | format | resume at | max abs logit err | mean abs | mean abs logit | "
             "greedy agreement | first disagreement | state rel. err | vs own resume | get ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["format"] == "(puts)":
            continue
        lines.append(
            f"| {r['model']} | {r['format']} | {r['depth_tokens']} | {r['max_abs']:.3g} | "
            f"{r['mean_abs']:.3g} | {r['logit_scale']:.3g} | {100 * r['greedy_agreement']:.1f}% | "
            f"{'-' if r['first_disagreement'] is None else r['first_disagreement']} | "
            f"{r.get('state_rel_err', 0):.3g} | "
            f"{_num(r, 'vs_own_resume_max_abs', '.3g')} | {_num(r, 'get_ms', '.2f')} |")
    for r in rows:
        if r["format"] == "(puts)":
            lines.append("")
            lines.append(f"{r['model']}: {len(FORMATS)} formats x {r['depth_tokens'] // BLOCK} "
                         f"checkpoints put over {r['transport']} in {r['put_seconds']:.2f} s.")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--out", default="")
    p.add_argument("--json", default="")
    p.add_argument("--quick", action="store_true", help="a short prompt and decode")
    args = p.parse_args()
    args.blocks, args.decode, args.depths = (4, 16, (2, 4)) if args.quick else (16, 256,
                                                                              (4, 8, 16))
    rows = []
    status = 0
    with leapcache.Client(args.target) as client:
        with client.attach("model-resume", transports=("cuda_ipc", "inline"),
                           gpu_index=0) as engine:
            print(f"data plane: {engine.transport}")
            for name, build in MODELS.items():
                status |= run_model(name, build, client, engine, args, rows)
    text = markdown(rows, args)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
