"""PyTorch twin of Megatron core's GPTModel with the local layer spec (core_v0.12.1), for the
parity tests of the C engine (include/megatron/gpt.h).

Our own code, written from Megatron's behaviour (megatron/core/models/gpt/gpt_model.py,
transformer/{attention,dot_product_attention,mlp,transformer_layer}.py, fusions/fused_bias_gelu.py,
models/common/embeddings/{rotary_pos_embedding,rope_utils}.py, tensor_parallel/cross_entropy.py)
and /work/shared/spec/megatron-model-parallel-ckpt.md sections 2.5, 3, 6.4, 6.5:

* parameter names, shapes, layouts and state-dict order are Megatron's (tp = 1): `linear_proj`
  registered before `linear_qkv`, QKV rows grouped per query group, SwiGLU fc1 = [gate; up];
* activations sequence-first [s, b, h]; pre-norm layers; final norm; logits [s, b, V];
* per-token cross-entropy [b, s] in Megatron's max-shift / log-sum-exp form;
* GELU: Megatron's fused bias-GELU (tanh approximation, 0.79788456 and 0.044715, with its
  hand-written backward) or exact erf; SwiGLU; squared ReLU;
* attention: 1/sqrt(kv_channels) scale (divided by the layer number with
  apply_query_key_layer_scaling, multiplied back before the softmax), masked_fill(-10000),
  GQA by repeat_interleave; RoPE ignores position_ids.

The config is a dict using the C struct's field names (struct mc_gpt_config) and enum codes.
"""
import math

import torch
import torch.nn.functional as F

# enum codes of include/megatron/gpt.h
NORM_LAYERNORM, NORM_RMSNORM = 0, 1
POS_LEARNED, POS_ROPE, POS_NONE = 0, 1, 2
ACT_GELU_TANH, ACT_GELU_ERF, ACT_SWIGLU, ACT_SQUARED_RELU = 0, 1, 2, 3

DEFAULTS = dict(
    num_layers=2, hidden_size=32, num_attention_heads=4, num_query_groups=0, kv_channels=0,
    ffn_hidden_size=0, vocab_size=100, padded_vocab_size=0, make_vocab_size_divisible_by=128,
    max_position_embeddings=64, seq_length=16, micro_batch_size=2,
    normalization=NORM_LAYERNORM, norm_epsilon=1e-5, layernorm_zero_centered_gamma=0,
    position_embedding_type=POS_LEARNED, rotary_percent=1.0, rotary_base=10000.0, rotary_interleaved=0, use_rope_scaling=0,
    rope_scaling_factor=8.0, rope_low_freq_factor=0.0, rope_high_freq_factor=0.0,
    rope_original_max_position=0.0, activation=ACT_GELU_TANH, add_bias_linear=1, add_qkv_bias=0,
    apply_query_key_layer_scaling=0, attention_softmax_in_fp32=0,
    untie_embeddings_and_output_weights=0, fp32_residual_connection=0, hidden_dropout=0.0,
    attention_dropout=0.0, init_method_std=0.02, seed=1234, sliding_window=0,
    alibi=0, alibi_fill_neg_inf=0, flash_attention=0,
)
ALIBI_ROW, ALIBI_SQUARE = 1, 2  # enum mc_alibi
FLOAT_FIELDS = {'norm_epsilon', 'rotary_percent', 'rotary_base', 'rope_scaling_factor',
                'rope_low_freq_factor', 'rope_high_freq_factor', 'rope_original_max_position',
                'hidden_dropout', 'attention_dropout', 'init_method_std'}


def f32(x):
    """The value a C `float` field holds (configs travel as f32 scalars)."""
    return float(torch.tensor(x, dtype=torch.float32))


def derive(cfg):
    """Fill Megatron's derived fields as TransformerConfig / validate_args do (tp = 1)."""
    c = dict(DEFAULTS)
    c.update(cfg)
    for k in FLOAT_FIELDS:
        c[k] = f32(c[k])
    if not c['num_query_groups']:
        c['num_query_groups'] = c['num_attention_heads']
    if not c['kv_channels']:
        c['kv_channels'] = c['hidden_size'] // c['num_attention_heads']
    if not c['ffn_hidden_size']:
        c['ffn_hidden_size'] = 4 * c['hidden_size']
    if not c['padded_vocab_size']:
        m = c['make_vocab_size_divisible_by']
        c['padded_vocab_size'] = (c['vocab_size'] + m - 1) // m * m
    if c['apply_query_key_layer_scaling']:
        c['attention_softmax_in_fp32'] = 1  # TransformerConfig.__post_init__
    assert c['num_attention_heads'] % c['num_query_groups'] == 0
    return c


# ---- 16-bit mode ---------------------------------------------------------------------------

DTYPES = {'fp32': None, 'bf16': torch.bfloat16, 'fp16': torch.float16}


class _Round(torch.autograd.Function):
    """A 16-bit tensor boundary in fp32 arithmetic: the value rounded to the dtype (nearest even)
    going forward, and the gradient arriving at it rounded too going backward (what a 16-bit
    op's output and a 16-bit grad_input hold)."""

    @staticmethod
    def forward(ctx, x, dt):
        ctx.dt = dt
        return x.to(dt).to(torch.float32)

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.dt).to(g.dtype), None


class _GradRound(torch.autograd.Function):
    """Identity going forward, the gradient rounded to the dtype going backward: inside a fused
    fp32 computation, where Megatron's fused kernel stores a 16-bit intermediate gradient (the
    bias-GELU / bias-SwiGLU backward returns one 16-bit tensor for both input and bias)."""

    @staticmethod
    def forward(ctx, x, dt):
        ctx.dt = dt
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.dt).to(g.dtype), None


class Precision:
    """Where the twin rounds: Megatron core's local spec run with --bf16 / --fp16 (params_dtype
    16-bit, Float16Module), i.e. every torch op on 16-bit tensors rounds its output once to the
    dtype, except the fp32 cross-entropy on output.float() (and the fp32 softmax with
    --attention-softmax-in-fp32).

    dtype 'fp32': off (the fp32 twin, bit for bit what it was). Otherwise two ways to run the same
    module code:
      explicit (native=False): the tensors stay fp32 holding 16-bit values; `r` rounds at every
        16-bit op output and, through its backward, every gradient that a 16-bit op returns
        (ops take their inputs through `r` too, so each consumer's grad_input is rounded before
        autograd adds them, as 16-bit autograd does). Runs fp16 on torch 1.13 (no Half GEMM).
      native (native=True): the parameters are 16-bit torch tensors and torch's own 16-bit CPU
        ops round (torch 1.13 has bf16; fp16 needs torch 2.x); `r` is the identity.
    fused: the elementwise fusions Megatron runs on a GPU (TorchScript / nvFuser / TE kernels
    computing in fp32, one rounding of each output): bias-GELU, bias-SwiGLU, bias-dropout-add,
    RoPE (--apply-rope-fusion) and the norms (fp32 inside, output rounded). This is design16
    section 3, what the C engine does.
    fused=False: Megatron's eager ops on a CPU (jit disabled, each op rounds): bias + GELU, the
    bias-dropout-add, RoPE and torch's own 16-bit LayerNorm / RMSNorm."""

    def __init__(self, dtype='fp32', native=False, fused=True):
        if dtype not in DTYPES:
            raise ValueError('dtype %r: expected one of %s' % (dtype, list(DTYPES)))
        if not native and not fused and DTYPES[dtype] is not None:
            raise ValueError('the eager (unfused) rounding points exist in native mode only')
        self.name, self.dt, self.native, self.fused = dtype, DTYPES[dtype], native, fused
        self.on = self.dt is not None

    def r(self, x):
        """A 16-bit op's output (or input: rounds the gradient this consumer sends back)."""
        if not self.on or self.native:
            return x
        return _Round.apply(x, self.dt)

    def gr(self, x):
        """An fp32 intermediate of a fused op whose gradient Megatron stores in 16 bits."""
        return _GradRound.apply(x, self.dt) if self.on else x

    def fuse(self, fn, *xs):
        """fn computed in fp32 on 16-bit inputs, its output rounded once (a fused kernel)."""
        if self.native:
            return fn(*[x.float() if x is not None else None for x in xs]).to(self.dt)
        return self.r(fn(*[self.r(x) if x is not None else None for x in xs]))

    def widened(self, fn, x, *ws):
        """--fp32-residual-connection: fn in fp32 on the fp32 residual x (not rounded, its grad
        stays fp32) and 16-bit operands ws widened (their grads rounded: the widening's
        backward); the output rounded once to the dtype (the next GEMM's input)."""
        if not self.fused:
            raise NotImplementedError('fp32 residual connection: fused rounding points only')
        if self.native:
            return fn(x.float(), *[w.float() if w is not None else None for w in ws]).to(self.dt)
        return self.r(fn(x, *[self.r(w) if w is not None else None for w in ws]))

    def mm(self, x, w):
        """x @ w^T: fp32 accumulation, one rounding (16-bit GEMM); the backward GEMMs likewise."""
        return self.r(torch.matmul(self.r(x), self.r(w).t()))

    def add(self, a, b):
        """a + b on 16-bit tensors (broadcasting: a bias's gradient is summed, then rounded)."""
        return self.r(self.r(a) + self.r(b))

    def mul(self, a, b):
        return self.r(self.r(a) * self.r(b))

    def const(self, x):
        """An fp32 constant cast to the dtype (no gradient)."""
        return x.to(self.dt) if self.native else x.to(self.dt).float()


FP32 = Precision()  # the modules' default: the fp32 twin


# ---- elementwise pieces -------------------------------------------------------------------

class BiasGeluTanh(torch.autograd.Function):
    """Megatron's fused bias-GELU: tanh approximation with 8-digit constants and its own backward
    formula (fusions/fused_bias_gelu.py), applied to y + bias."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
        d = 0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + t)
        return d * g


def activation(c, u):
    a = c['activation']
    if a == ACT_GELU_TANH:
        return BiasGeluTanh.apply(u)
    if a == ACT_GELU_ERF:
        return F.gelu(u)
    if a == ACT_SWIGLU:
        gate, up = torch.chunk(u, 2, dim=-1)
        return F.silu(gate) * up
    if a == ACT_SQUARED_RELU:
        return torch.pow(F.relu(u), 2)
    raise ValueError('activation %r' % a)


def _swiglu(u):
    gate, up = torch.chunk(u, 2, dim=-1)
    return F.silu(gate) * up


class _EagerBiasGelu(torch.autograd.Function):
    """fused_bias_gelu.GeLUFunction with jit off (Megatron on a CPU), on 16-bit tensors: each op
    of bias_gelu / bias_gelu_back rounds; the one 16-bit tensor the backward returns is the
    input's gradient and, summed over tokens, the bias's."""

    @staticmethod
    def forward(ctx, y, bias):
        ctx.save_for_backward(y, bias)
        x = bias + y
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, g):
        y, bias = ctx.saved_tensors
        x = bias + y
        t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
        ff = 0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + t)
        d = ff * g
        return d, d.sum(dim=tuple(range(d.dim() - 1)))


class _EagerSwiglu(torch.autograd.Function):
    """fused_bias_swiglu.SwiGLUFunction / BiasSwiGLUFunction with jit off, on 16-bit tensors (ops
    round one by one; with a bias, y + bias is rounded and its gradient serves the bias too)."""

    @staticmethod
    def forward(ctx, y, bias):
        ctx.save_for_backward(y, bias)
        if bias is not None:
            y = y + bias
        a, b = torch.chunk(y, 2, -1)
        return F.silu(a) * b

    @staticmethod
    def backward(ctx, g):
        y, bias = ctx.saved_tensors
        if bias is not None:
            y = y + bias
        a, b = torch.chunk(y, 2, -1)
        d = torch.cat((g * torch.sigmoid(a) * (1 + a * (1 - torch.sigmoid(a))) * b, g * F.silu(a)), -1)
        return d, (d.sum(dim=tuple(range(d.dim() - 1))) if bias is not None else None)


def activation16(p, c, u, ub):
    """MLP activation on the 16-bit fc1 output u (bias ub kept apart: linear_fc1 skips it).
    GELU-tanh and SwiGLU are Megatron's bias-activation fusions: fused, fp32 inside with one
    rounding of the output and of the gradient they store (the bias grad is that rounded
    gradient summed over tokens, then rounded); eager (CPU, jit off) op by op. The other
    activations are not fused in Megatron: round(u + b), then torch's op (one rounding)."""
    a = c['activation']
    if a == ACT_GELU_TANH:
        if ub is None:
            raise ValueError('the fused bias-GELU needs the linear bias (add_bias_linear)')
        if p.fused:
            return p.fuse(lambda y, b: BiasGeluTanh.apply(p.gr(y + b)), u, ub)
        return _EagerBiasGelu.apply(u, ub)
    if a == ACT_SWIGLU:
        if p.fused:
            return p.fuse(lambda y, b: _swiglu(p.gr(y + b) if b is not None else y), u, ub)
        return _EagerSwiglu.apply(u, ub)
    if ub is not None:
        u = p.add(u, ub)
    if p.native:  # torch's own 16-bit op (fp32 inside on torch 2; torch 1.13's bf16 GELU is not)
        return activation(c, u)
    return p.fuse(lambda y: activation(c, y), u)


class VocabCrossEntropy(torch.autograd.Function):
    """tensor_parallel/cross_entropy.py at tp = 1: loss = log(sum exp(z)) - z[target] with
    z = logits - max; backward softmax - onehot."""

    @staticmethod
    def forward(ctx, logits, target):
        z = logits - logits.max(dim=-1, keepdim=True)[0]
        t = torch.gather(z, -1, target.unsqueeze(-1)).squeeze(-1)
        e = z.exp()
        s = e.sum(dim=-1)
        ctx.save_for_backward(e / s.unsqueeze(-1), target)
        return torch.log(s) - t

    @staticmethod
    def backward(ctx, g):
        sm, target = ctx.saved_tensors
        grad = sm.clone()
        grad.scatter_add_(-1, target.unsqueeze(-1), -torch.ones_like(target, dtype=grad.dtype).unsqueeze(-1))
        return grad * g.unsqueeze(-1), None


# ---- RoPE ---------------------------------------------------------------------------------

def rope_inv_freq(c):
    dim = c['kv_channels']
    if c['rotary_percent'] < 1.0:
        dim = int(dim * c['rotary_percent'])
    inv = 1.0 / (c['rotary_base'] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    if c['use_rope_scaling']:
        # Megatron's fixed constants, or MindSpeed-LLM's --low-freq-factor /
        # --high-freq-factor / --original-max-position-embeddings
        factor = c['rope_scaling_factor']
        low = c['rope_low_freq_factor'] or 1
        high = c['rope_high_freq_factor'] or 4
        old = c['rope_original_max_position'] or 8192
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) * ~(wavelen > old / low)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rope_freqs(c, s):
    """[s, 1, 1, dim]: positions 0..s-1 always (Megatron's RoPE ignores position_ids)."""
    inv = rope_inv_freq(c)
    f = torch.outer(torch.arange(s, dtype=torch.float32), inv)
    if not c['rotary_interleaved']:
        emb = torch.cat((f, f), dim=-1)
    else:
        emb = torch.stack((f.reshape(-1, 1), f.reshape(-1, 1)), dim=-1).reshape(f.shape[0], -1)
    return emb[:, None, None, :]


def rotate_half(x, interleaved):
    if not interleaved:
        a, b = torch.chunk(x, 2, dim=-1)
        return torch.cat((-b, a), dim=-1)
    a, b = x[..., ::2], x[..., 1::2]
    return torch.stack((-b, a), dim=-1).reshape(x.shape)


def apply_rope(t, freqs, interleaved):
    d = freqs.shape[-1]
    head, rest = t[..., :d], t[..., d:]
    head = head * torch.cos(freqs) + rotate_half(head, interleaved) * torch.sin(freqs)
    return torch.cat((head, rest), dim=-1)


def apply_rope16(p, t, freqs, interleaved):
    """RoPE on a 16-bit t. Fused (--apply-rope-fusion, TE's kernel on a GPU): t * cos +
    rotate_half(t) * sin in fp32 with fp32 cos / sin, rounded once. Eager
    (rope_utils._apply_rotary_pos_emb_bshd, Megatron on a CPU): cos and sin cast to t's dtype,
    each product and the sum rounded."""
    d = freqs.shape[-1]
    head, rest = t[..., :d], t[..., d:]
    if p.fused:
        head = p.fuse(lambda h: apply_rope(h, freqs, interleaved), head)
    else:
        cos, sin = p.const(torch.cos(freqs)), p.const(torch.sin(freqs))
        head = p.add(p.mul(head, cos), p.mul(rotate_half(p.r(head), interleaved), sin))
    return torch.cat((head, rest), dim=-1)


class _ScaledBmm(torch.autograd.Function):
    """torch.baddbmm(_, a, b, beta=0, alpha) on 16-bit tensors in fp32 arithmetic: out =
    round(alpha * a b); backward as torch derives it, round(round(g b^T) * alpha) and
    round(round(a^T g) * alpha)."""

    @staticmethod
    def forward(ctx, a, b, alpha, dt):
        ctx.save_for_backward(a, b)
        ctx.alpha, ctx.dt = alpha, dt
        return (torch.bmm(a, b) * alpha).to(dt).float()

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        rnd = lambda x: x.to(ctx.dt).float()
        return (rnd(rnd(torch.bmm(g, b.transpose(1, 2))) * ctx.alpha),
                rnd(rnd(torch.bmm(a.transpose(1, 2), g)) * ctx.alpha), None, None)


class _Softmax16(torch.autograd.Function):
    """softmax(masked_fill(x, mask, -10000)) on a 16-bit tensor in fp32 arithmetic: fp32 inside,
    the probabilities rounded; the backward (fp32 inside, rounded by the caller's boundary) works
    from the rounded probabilities it saved, as torch's 16-bit softmax backward does."""

    @staticmethod
    def forward(ctx, x, mask, dt):
        probs = torch.softmax(x.masked_fill(mask, -10000.0), dim=-1).to(dt).float()
        ctx.save_for_backward(probs, mask)
        return probs

    @staticmethod
    def backward(ctx, g):
        probs, mask = ctx.saved_tensors
        d = probs * (g - (g * probs).sum(dim=-1, keepdim=True))
        return d.masked_fill(mask, 0.0), None, None


class _Embedding16(torch.autograd.Function):
    """F.embedding on a 16-bit weight in fp32 arithmetic. Backward as torch's 16-bit CPU
    embedding backward (the one Megatron's VocabParallelEmbedding gets on a CPU): each token's
    gradient row is added to its weight row in token order ([b, s] flattened), rounding after
    every add."""

    @staticmethod
    def forward(ctx, weight, ids, dt):
        ctx.save_for_backward(ids)
        ctx.shape, ctx.dt = weight.shape, dt
        return weight[ids]

    @staticmethod
    def backward(ctx, g):
        (ids,) = ctx.saved_tensors
        flat, rows = ids.reshape(-1), g.reshape(-1, g.shape[-1])
        dw = torch.zeros(ctx.shape, dtype=g.dtype)
        for i in range(flat.numel()):
            t = int(flat[i])
            dw[t] = (dw[t] + rows[i]).to(ctx.dt).float()
        return dw, None, None


def embedding16(p, weight, ids):
    if p.native:
        return F.embedding(ids, weight)
    return _Embedding16.apply(p.r(weight), ids, p.dt)


def scaled_bmm16(p, a, b, alpha):
    if p.native:
        out = torch.empty(a.shape[0], a.shape[1], b.shape[2], dtype=a.dtype)
        return torch.baddbmm(out, a, b, beta=0.0, alpha=alpha)
    return _ScaledBmm.apply(p.r(a), p.r(b), alpha, p.dt)


def bmm16(p, a, b):
    return p.r(torch.bmm(p.r(a), p.r(b)))



# ---- dropout ----------------------------------------------------------------------------------

_M0, _M1, _W0, _W1, _MASK = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85, 0xFFFFFFFF


def philox4x32_10(c0, c1, c2, c3, seed):
    """Philox4x32-10 (Salmon et al., SC'11) on uint64 numpy arrays holding 32-bit words; the
    generator the C engine's src/core/rng.h defines (key = (seed low, seed high))."""
    import numpy as np
    c = [np.asarray(x, dtype=np.uint64) & _MASK for x in (c0, c1, c2, c3)]
    k0, k1 = np.uint64(seed & _MASK), np.uint64((seed >> 32) & _MASK)
    for r in range(10):
        p0 = np.uint64(_M0) * c[0]
        p1 = np.uint64(_M1) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & np.uint64(_MASK),
             (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & np.uint64(_MASK)]
        if r < 9:
            k0 = np.uint64((int(k0) + _W0) & _MASK)
            k1 = np.uint64((int(k1) + _W1) & _MASK)
    return c


def philox_keep(n, seed, c2, c3, p):
    """Keep mask of elements 0..n-1 of stream (c2, c3), rng.h's rule: element i uses word i % 4
    of block i // 4 (counter (i//4 low, i//4 high, c2, c3)); u = (word >> 8) * 2^-24; keep iff
    u >= p in fp32."""
    import numpy as np
    j = np.arange((n + 3) // 4, dtype=np.uint64)
    words = philox4x32_10(j & np.uint64(_MASK), j >> np.uint64(32), np.full_like(j, c2),
                          np.full_like(j, c3), seed)
    w = np.stack(words, axis=1).reshape(-1)[:n]
    u = (w >> np.uint64(8)).astype(np.float32) * np.float32(2.0 ** -24)
    return torch.from_numpy(u >= np.float32(p))


class Dropout:
    """Where dropout draws from. mode 'torch': torch's generator (statistics only). mode
    'philox': the C engine's documented streams (src/models/gpt/gpt_model.c): key = seed,
    c2 = step, c3 = (micro << 24) | site with site 0 = embedding, 1 + 3l = attention probs of
    layer l, 2 + 3l = after linear_proj, 3 + 3l = after linear_fc2; hidden sites index the
    [s, b, h] tensor, attention sites the [b, np, s, s] probabilities."""

    def __init__(self):
        self.mode, self.seed, self.step, self.micro = 'torch', 0, 0, 0

    def __call__(self, x, p, site, training):
        if not training or p == 0.0:
            return x
        if self.mode == 'torch':
            return F.dropout(x, p, True)
        c3 = ((self.micro & 0xff) << 24) | (site & 0xffffff)
        keep = philox_keep(x.numel(), self.seed, self.step & _MASK, c3, f32(p)).view(x.shape)
        scale = float(torch.tensor(1.0, dtype=torch.float32) / (1.0 - torch.tensor(p, dtype=torch.float32)))
        return x * keep.to(x.dtype) * scale

# ---- modules (names = Megatron's state-dict names) -----------------------------------------

class Weight(torch.nn.Module):
    def __init__(self, rows, cols):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(rows, cols))


class Linear(torch.nn.Module):
    """Column/row-parallel linear at tp = 1: y = x W^T (+ b); the bias is returned separately
    where Megatron uses skip_bias_add and added by the caller."""
    prec = FP32


    def __init__(self, out_f, in_f, bias):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(out_f, in_f))
        self.bias = torch.nn.Parameter(torch.zeros(out_f)) if bias else None

    def forward(self, x):
        if self.prec.on:
            return self.prec.mm(x, self.weight), self.bias
        return torch.matmul(x, self.weight.t()), self.bias


class Norm(torch.nn.Module):
    prec = FP32

    def __init__(self, c, n):
        super().__init__()
        self.rms = c['normalization'] == NORM_RMSNORM
        self.eps = c['norm_epsilon']
        # --fp32-residual-connection: the hidden-state norms read the fp32 residual stream
        self.fp32_in = bool(c['fp32_residual_connection'])
        # --apply-layernorm-1p: the weight is stored zero-centered and the norm scales by
        # weight + 1 (FusedLayerNorm / TENorm zero_centered_gamma), initialized to zeros
        self.one_p = bool(c['layernorm_zero_centered_gamma'])
        self.weight = torch.nn.Parameter(torch.zeros(n) if self.one_p else torch.ones(n))
        self.bias = None if self.rms else torch.nn.Parameter(torch.zeros(n))

    def forward(self, x):
        if self.prec.on:
            return self.forward16(x)
        return self.norm(x, self.weight, self.bias)

    def norm(self, x, weight, bias):
        w = weight + 1 if self.one_p else weight
        if self.rms:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w
        return F.layer_norm(x, (x.shape[-1],), w, bias, self.eps)

    def forward16(self, x):
        p = self.prec
        if self.fp32_in:  # fp32 input, 16-bit weights widened, output rounded once
            return p.widened(self.norm, x, self.weight, self.bias)
        if p.fused:  # fp32 inside, output rounded once (apex's / TE's fused norm kernels)
            return p.fuse(self.norm, x, self.weight, self.bias)
        # eager: torch's own 16-bit norms, as Megatron's WrappedTorchNorm calls them: LayerNorm
        # is one kernel (fp32 inside, its backward too, with its own rounding of dx); torch >=
        # 2.4's RMSNorm normalizes in fp32, rounds, then multiplies by the weight (a second
        # rounding); the team's shim on torch 1.13 rounds op by op
        w = self.weight + 1 if self.one_p else self.weight
        if not self.rms:
            return F.layer_norm(x, (x.shape[-1],), w, self.bias, self.eps)
        if hasattr(F, 'rms_norm'):
            return F.rms_norm(x, (x.shape[-1],), w, self.eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w


def alibi_slopes(n):
    """MindSpeed-LLM's ALiBi slopes of n heads (its get_slopes, in closed form): with
    p = 2^floor(log2 n), 2^(-8 (k + 1) / p) for the first p heads, then the odd-numbered slopes
    of the 2p set, 2^(-8 (2m + 1) / (2p)); fp32 as torch.Tensor(list) makes them."""
    p = 2 ** int(math.floor(math.log2(n)))
    out = [2.0 ** (-8.0 * (k + 1) / p) for k in range(p)]
    out += [2.0 ** (-8.0 * (2 * m + 1) / (2 * p)) for m in range(n - p)]
    return torch.tensor(out, dtype=torch.float32)


def alibi_bias(c, s):
    """[heads, s, s] fp32 bias of MindSpeed's _build_alibi_tensor: slope * (j - i) with
    --square-alibi-mask, else the [heads, 1, s] row slope * j (broadcast)."""
    sl = alibi_slopes(c['num_attention_heads']).view(-1, 1, 1)
    j = torch.arange(s).view(1, 1, s)
    if c['alibi'] == ALIBI_SQUARE:
        return sl * (j - torch.arange(s).view(1, s, 1))
    return sl * j


class SelfAttention(torch.nn.Module):
    prec = FP32

    def __init__(self, c, layer_number, drop):
        super().__init__()
        self.c = c
        self.drop = drop
        self.layer_number = layer_number  # 1-based, global
        np_, ng, hn, h = c['num_attention_heads'], c['num_query_groups'], c['kv_channels'], c['hidden_size']
        # Megatron registers linear_proj (in Attention.__init__) before linear_qkv
        self.linear_proj = Linear(h, np_ * hn, c['add_bias_linear'])
        self.linear_qkv = Linear((np_ + 2 * ng) * hn, h, c['add_bias_linear'] or c['add_qkv_bias'])

    def forward(self, x, mask, freqs):
        if self.prec.on:
            return self.forward16(x, mask, freqs)
        c = self.c
        s, b, _ = x.shape
        np_, ng, hn = c['num_attention_heads'], c['num_query_groups'], c['kv_channels']
        qkv, qkv_b = self.linear_qkv(x)
        if qkv_b is not None:
            qkv = qkv + qkv_b
        qkv = qkv.view(s, b, ng, (np_ // ng + 2) * hn)
        q, k, v = torch.split(qkv, [np_ // ng * hn, hn, hn], dim=3)
        q = q.reshape(s, b, np_, hn)
        if freqs is not None:
            q = apply_rope(q, freqs, c['rotary_interleaved'])
            k = apply_rope(k, freqs, c['rotary_interleaved'])
        if np_ // ng > 1:
            k = k.repeat_interleave(np_ // ng, dim=2)
            v = v.repeat_interleave(np_ // ng, dim=2)
        scale = 1.0 / math.sqrt(hn)
        coeff = None
        if c['apply_query_key_layer_scaling']:
            coeff = self.layer_number
            scale /= coeff
        # [b, np, sq, sk]
        scores = torch.einsum('sbnd,tbnd->bnst', q, k) * scale
        if c['alibi']:
            return self.linear_proj(self.alibi_attention(scores, mask, coeff, v))
        if coeff is not None:
            scores = scores * coeff
        scores = scores.masked_fill(mask, -10000.0)
        probs = torch.softmax(scores, dim=-1)
        probs = self.drop(probs, c['attention_dropout'], 1 + 3 * (self.layer_number - 1), self.training)
        ctx = torch.einsum('bnst,tbnd->sbnd', probs, v).reshape(s, b, np_ * hn)
        return self.linear_proj(ctx)

    def alibi_attention(self, scores, mask, coeff, v):
        """MindSpeed-LLM's AlibiAttention on scores = q k^T / norm_factor [b, np, s, s]:
        + beta * bias (beta = 1 / coeff), then the square form with --fill-neg-inf: the mask
        as -inf inside the bias, clamped at finfo.min, softmax of (x coeff: Megatron's scaling
        back, which MindSpeed's square path skips: COMPATIBILITY.md); otherwise
        FusedScaleMaskSoftmax (x coeff, masked_fill -10000) with the row bias (-inf on the
        future keys with --fill-neg-inf, overwritten by the fill)."""
        c = self.c
        b, np_, s, _ = scores.shape
        bias = alibi_bias(c, s).expand(np_, s, s)
        beta = 1.0 / coeff if coeff is not None else 1.0
        future = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
        full = mask.expand(b, 1, s, s)
        if c['alibi'] == ALIBI_SQUARE and c['alibi_fill_neg_inf']:
            pse = bias[None].masked_fill(full, float('-inf'))
            sc = (scores + beta * pse) * (coeff or 1.0)
            sc = torch.max(sc, torch.tensor(torch.finfo(sc.dtype).min))
        else:
            if c['alibi_fill_neg_inf']:
                bias = bias.masked_fill(future, float('-inf'))
            sc = scores + beta * bias[None]
            if coeff is not None:
                sc = sc * coeff
            sc = sc.masked_fill(full, -10000.0)
        probs = torch.softmax(sc, dim=-1)
        probs = self.drop(probs, c['attention_dropout'], 1 + 3 * (self.layer_number - 1), self.training)
        s_, b_ = v.shape[0], v.shape[1]
        return torch.einsum('bnst,tbnd->sbnd', probs, v).reshape(s_, b_, -1)

    def forward16(self, x, mask, freqs):
        """Megatron's 16-bit rounding points: linear_qkv round(round(x W^T) + b); RoPE with cos and
        sin rounded, each product and the sum rounded; scores = round(alpha q k^T) (baddbmm);
        softmax fp32 inside (or of the widened scores with --attention-softmax-in-fp32), probs
        rounded; ctx = round(probs v) (bmm)."""
        c, p = self.c, self.prec
        if c['alibi']:
            raise NotImplementedError('gpt_twin: ALiBi in the 16-bit modes')
        s, b, _ = x.shape
        np_, ng, hn = c['num_attention_heads'], c['num_query_groups'], c['kv_channels']
        qkv, qkv_b = self.linear_qkv(x)
        if qkv_b is not None:
            qkv = p.add(qkv, qkv_b)
        qkv = qkv.view(s, b, ng, (np_ // ng + 2) * hn)
        q, k, v = torch.split(qkv, [np_ // ng * hn, hn, hn], dim=3)
        q = q.reshape(s, b, np_, hn)
        if freqs is not None:
            q = apply_rope16(p, q, freqs, c['rotary_interleaved'])
            k = apply_rope16(p, k, freqs, c['rotary_interleaved'])
        if np_ // ng > 1:
            k = k.repeat_interleave(np_ // ng, dim=2)
            v = v.repeat_interleave(np_ // ng, dim=2)
        scale = 1.0 / math.sqrt(hn)
        coeff = None
        if c['apply_query_key_layer_scaling']:
            coeff = self.layer_number
            scale /= coeff
        # [b * np, s, hn] as DotProductAttention lays them out for baddbmm / bmm
        qb = q.reshape(s, b * np_, hn).transpose(0, 1)
        kb = k.reshape(s, b * np_, hn).transpose(0, 1)
        vb = v.reshape(s, b * np_, hn).transpose(0, 1)
        scores = scaled_bmm16(p, qb, kb.transpose(1, 2), scale).view(b, np_, s, s)
        if c['attention_softmax_in_fp32']:  # widened, scaled, fp32 softmax, then rounded
            def softmax(sc):
                sc = sc * coeff if coeff is not None else sc
                return torch.softmax(sc.masked_fill(mask, -10000.0), dim=-1)
            probs = p.fuse(softmax, scores)
        elif p.native:  # torch's 16-bit softmax (fp32 inside, output rounded) on the 16-bit fill value
            probs = torch.softmax(scores.masked_fill(mask, -10000.0), dim=-1)
        else:
            probs = _Softmax16.apply(p.r(scores), mask, p.dt)
        probs = p.r(self.drop(probs, c['attention_dropout'], 1 + 3 * (self.layer_number - 1), self.training))
        ctx = bmm16(p, probs.view(b * np_, s, s), vb)
        ctx = ctx.view(b, np_, s, hn).permute(2, 0, 1, 3).reshape(s, b, np_ * hn)
        return self.linear_proj(ctx)


class MLP(torch.nn.Module):
    prec = FP32

    def __init__(self, c):
        super().__init__()
        self.c = c
        ffn, h = c['ffn_hidden_size'], c['hidden_size']
        gated = c['activation'] == ACT_SWIGLU
        self.linear_fc1 = Linear(2 * ffn if gated else ffn, h, c['add_bias_linear'])
        self.linear_fc2 = Linear(h, ffn, c['add_bias_linear'])

    def forward(self, x):
        u, ub = self.linear_fc1(x)
        if self.prec.on:
            return self.linear_fc2(activation16(self.prec, self.c, u, ub))
        if ub is not None:
            u = u + ub
        return self.linear_fc2(activation(self.c, u))


class TransformerLayer(torch.nn.Module):
    prec = FP32

    def __init__(self, c, layer_number, drop):
        super().__init__()
        self.c = c
        self.drop = drop
        self.layer_number = layer_number
        h = c['hidden_size']
        self.input_layernorm = Norm(c, h)
        self.self_attention = SelfAttention(c, layer_number, drop)
        self.pre_mlp_layernorm = Norm(c, h)
        self.mlp = MLP(c)

    def bias_dropout_add(self, out, bias, residual, site):
        if self.prec.on:
            return self.bias_dropout_add16(out, bias, residual, site)
        if bias is not None:
            out = out + bias
        return residual + self.drop(out, self.c['hidden_dropout'], site, self.training)

    def bias_dropout_add16(self, out, bias, residual, site):
        p = self.prec
        drop = lambda t: self.drop(t, self.c['hidden_dropout'], site, self.training)
        if self.c['fp32_residual_connection']:
            # upstream's fixed _bias_dropout_add_func (Megatron-LM PR #3504): x and bias cast up
            # to the fp32 residual, the sum kept in fp32
            up = (lambda t: t.float()) if p.native else p.r
            return residual + drop(up(out) + up(bias) if bias is not None else up(out))
        if p.fused:  # one fp32 kernel, one rounding (bias_dropout_add_fused_train on a GPU)
            return p.fuse(lambda o, b, r: r + drop(o + b if b is not None else o), out, bias, residual)
        if bias is not None:  # eager: each op rounds
            out = out + bias
        return residual + drop(out)

    def forward(self, x, mask, freqs):
        l0 = self.layer_number - 1
        o, ob = self.self_attention(self.input_layernorm(x), mask, freqs)
        x = self.bias_dropout_add(o, ob, x, 2 + 3 * l0)
        y, yb = self.mlp(self.pre_mlp_layernorm(x))
        return self.bias_dropout_add(y, yb, x, 3 + 3 * l0)


class TransformerBlock(torch.nn.Module):
    def __init__(self, c, drop):
        super().__init__()
        self.layers = torch.nn.ModuleList([TransformerLayer(c, i + 1, drop) for i in range(c['num_layers'])])
        self.final_layernorm = Norm(c, c['hidden_size'])


class Embedding(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = Weight(c['padded_vocab_size'], c['hidden_size'])
        if c['position_embedding_type'] == POS_LEARNED:
            self.position_embeddings = Weight(c['max_position_embeddings'], c['hidden_size'])


class GPTTwin(torch.nn.Module):
    def __init__(self, cfg, precision=None):
        super().__init__()
        c = self.c = derive(cfg)
        self.hooks = None  # a dict to record the hook-point activations of include/megatron/dump.h
        self.dropout = Dropout()
        self.embedding = Embedding(c)
        self.decoder = TransformerBlock(c, self.dropout)
        if c['untie_embeddings_and_output_weights']:
            self.output_layer = Weight(c['padded_vocab_size'], c['hidden_size'])
        self.set_precision(precision or Precision())

    def set_precision(self, prec):
        """Switch every module to `prec` (a Precision). The weights are rounded to its dtype
        (Megatron's model params = round(fp32 init)); native mode makes them 16-bit tensors, a
        return to fp32 widens them."""
        if prec.native and prec.dt is None:
            raise ValueError('native mode needs a 16-bit dtype')
        for m in self.modules():
            m.prec = prec
        with torch.no_grad():
            for prm in self.parameters():
                prm.data = prm.data.to(prec.dt) if prec.native else prm.data.float()
                if prec.on and not prec.native:
                    prm.data = prm.data.to(prec.dt).float()

    def param_grads(self):
        """fp32 copies of the parameter grads as Megatron's main_grad holds them: float(16-bit
        param.grad). (Explicit mode: a tied weight's two rounded contributions are added in fp32
        by autograd; that sum is rounded here, as 16-bit autograd adds them.)"""
        out = {}
        for n, prm in self.named_parameters():
            g = prm.grad
            out[n] = (g.to(self.prec.dt).float() if self.prec.on else g).detach().clone()
        return out

    def output_weight(self):
        if self.c['untie_embeddings_and_output_weights']:
            return self.output_layer.weight
        return self.embedding.word_embeddings.weight

    def _hook(self, name, t):
        """Same names and repeat rule ("@1", "@2", ...) as mc_dump_hook."""
        if self.hooks is None:
            return
        key, k = name, 0
        while key in self.hooks:
            k += 1
            key = '%s@%d' % (name, k)
        self.hooks[key] = t.detach().clone()

    def set_dropout(self, mode, step=0, micro=0):
        """'torch' or 'philox' (the C engine's streams at this step / micro-batch)."""
        self.dropout.mode, self.dropout.step, self.dropout.micro = mode, step, micro
        self.dropout.seed = int(self.c['seed'])

    def set_dropout_rates(self, hidden, attention):
        self.c['hidden_dropout'], self.c['attention_dropout'] = f32(hidden), f32(attention)

    def forward(self, tokens, position_ids=None, attention_mask=None, labels=None):
        """tokens [b, s] int64; position_ids [b, s] (None = 0..s-1); attention_mask [b, 1, s, s]
        bool, True = masked out (None = causal); labels [b, s]. Returns (logits [s, b, V],
        per-token loss [b, s] or None)."""
        c, p = self.c, self.prec
        b, s = tokens.shape
        if p.on:  # VocabParallelEmbedding: F.embedding (and its 16-bit backward)
            x = embedding16(p, self.embedding.word_embeddings.weight, tokens)
        else:
            x = self.embedding.word_embeddings.weight[tokens]
        if c['position_embedding_type'] == POS_LEARNED:
            if position_ids is None:
                position_ids = torch.arange(s).unsqueeze(0).expand(b, s)
            if p.on:
                x = p.add(x, embedding16(p, self.embedding.position_embeddings.weight, position_ids))
            else:
                x = x + self.embedding.position_embeddings.weight[position_ids]
        x = x.transpose(0, 1).contiguous()
        if p.on and c['fp32_residual_connection']:  # embeddings.float(), then fp32 dropout
            x = self.dropout(x.float() if p.native else x, c['hidden_dropout'], 0, self.training)
        else:
            x = p.r(self.dropout(x, c['hidden_dropout'], 0, self.training))
        self._hook('embedding.output', x)
        if attention_mask is None:
            attention_mask = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)[None, None]
        if c['sliding_window']:  # MindSpeed's band: keys before i - W masked too
            attention_mask = attention_mask | torch.tril(
                torch.ones(s, s, dtype=torch.bool), diagonal=-(c['sliding_window'] + 1))[None, None]
        freqs = rope_freqs(c, s) if c['position_embedding_type'] == POS_ROPE else None
        for i, layer in enumerate(self.decoder.layers):
            x = layer(x, attention_mask, freqs)
            self._hook('decoder.layers.%d.output' % i, x)
        x = self.decoder.final_layernorm(x)
        self._hook('decoder.final_layernorm.output', x)
        if p.on:
            logits = p.mm(x, self.output_weight())
        else:
            logits = torch.matmul(x, self.output_weight().t())
        self._hook('output_layer.output', logits)
        loss = None
        if labels is not None:
            loss = VocabCrossEntropy.apply(logits.float(), labels.transpose(0, 1).contiguous())
            loss = loss.transpose(0, 1).contiguous()
        return logits, loss


# ---- weights, optimizer -----------------------------------------------------------------------

def randomize(model, gen, std=0.2):
    """Fresh random weights for parity tests: every tensor random (norm weights around 1, biases
    non-zero) so that every gradient path is exercised."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith('layernorm.weight'):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith('.bias'):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(std * torch.randn(p.shape, generator=gen))


def no_weight_decay(name, p):
    """Megatron's rule (optimizer/__init__.py _get_param_groups): biases and every 1-D tensor."""
    return name.endswith('.bias') or p.dim() == 1


def grad_norm_and_clip(params, clip_grad):
    """optimizer/clip_grads.py at tp = pp = 1: L2 norm of all grads in fp32; scale by
    clip/(norm + 1e-6) when that is below 1. Returns the norm before clipping."""
    norm = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in params))
    if clip_grad > 0:
        coeff = clip_grad / (norm + 1e-6)
        if coeff < 1.0:
            for p in params:
                p.grad.mul_(coeff)
    return float(norm)


def make_adamw(model, beta1, beta2, eps):
    """AdamW (decoupled weight decay, bias correction) with Megatron's two groups; torch.optim.AdamW
    is what Megatron falls back to without apex/TE and is mathematically apex FusedAdam adam_w_mode."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if no_weight_decay(name, p) else decay).append(p)
    groups = [dict(params=decay, wd_mult=1.0), dict(params=no_decay, wd_mult=0.0)]
    return torch.optim.AdamW(groups, lr=0.0, betas=(beta1, beta2), eps=eps, weight_decay=0.0)


def make_sgd(model, momentum):
    """--optimizer sgd: torch.optim.SGD (weight decay added to the gradient, momentum buffer
    started from the first gradient) with Megatron's two groups."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if no_weight_decay(name, p) else decay).append(p)
    groups = [dict(params=decay, wd_mult=1.0), dict(params=no_decay, wd_mult=0.0)]
    return torch.optim.SGD(groups, lr=0.0, momentum=momentum, weight_decay=0.0)


def set_lr_wd(opt, lr, wd):
    for g in opt.param_groups:
        g['lr'] = lr
        g['weight_decay'] = wd * g['wd_mult']


# ---- tensor-parallel layout -------------------------------------------------------------------

def tp_shard(name, t, c, tp, rank):
    """This rank's shard of full (tp = 1) parameter `t` in Megatron's layout (spec 2.2-2.4, 3.3,
    3.6): vocab rows for the embedding / output layer, contiguous output rows for column-parallel
    weights and biases (QKV: whole query groups), input columns for row-parallel weights, SwiGLU
    fc1 = [gate_r; up_r]; norms and row-parallel biases are replicated."""
    def rows(x):
        n = x.shape[0] // tp
        return x[rank * n:(rank + 1) * n]
    if name.endswith('word_embeddings.weight') or name == 'output_layer.weight':
        return rows(t)
    if '.linear_qkv.' in name:
        return rows(t)
    if '.linear_fc1.' in name:
        if c['activation'] == ACT_SWIGLU:
            gate, up = torch.chunk(t, 2, dim=0)
            return torch.cat((rows(gate), rows(up)), dim=0)
        return rows(t)
    if name.endswith('linear_proj.weight') or name.endswith('linear_fc2.weight'):
        n = t.shape[1] // tp
        return t[:, rank * n:(rank + 1) * n]
    return t


def tp_unshard(name, shards, c):
    """Inverse of tp_shard: the full parameter from every rank's shard (replicated tensors are
    taken from rank 0)."""
    tp = len(shards)
    if name.endswith('linear_proj.weight') or name.endswith('linear_fc2.weight'):
        return torch.cat(shards, dim=1)
    if '.linear_fc1.' in name and c['activation'] == ACT_SWIGLU:
        halves = [torch.chunk(x, 2, dim=0) for x in shards]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
    if (name.endswith('word_embeddings.weight') or name == 'output_layer.weight' or
            '.linear_qkv.' in name or '.linear_fc1.' in name):
        return torch.cat(shards, dim=0)
    assert tp >= 1
    return shards[0]
