"""Writes interleaved_golden.txt: the per-rank order of forward steps, backward steps and
point-to-point exchanges of Megatron-LM core_v0.12.1's own
forward_backward_pipelining_with_interleaving (megatron/core/pipeline_parallel/schedules.py),
run in one Python process with the model, the data and the communication stubbed out.

Usage: /usr/bin/python3 make_interleaved_golden.py /path/to/Megatron-LM > interleaved_golden.txt

Each line: `interleaved pp=<P> vp=<V> N=<group> M=<micro-batches> <overlap|batched>
<train|forward> rank=<r> : <events>` where N is microbatch_group_size_per_vp_stage, overlap /
batched is overlap_p2p_comm (Megatron's default) or --no-overlap-p2p-communication, and an event
is F<chunk>.<k> (forward of micro-batch k on model chunk `chunk`), B<chunk>.<k> (its backward) or
one exchange posted with the neighbours of the pipeline ring, spelled by what it does: Sn = send
to the next stage, Sp = send to the previous stage, Rp = receive from the previous stage, Rn =
receive from the next stage, joined by '+' when posted together; `-` is an exchange call with
nothing to send or receive. A line whose schedule refuses the configuration reads
`error <ExceptionType>: <message>` instead of events."""
import sys
import types

sys.path.insert(0, sys.argv[1])
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

# Megatron imports names this torch (1.13, CPU) lacks; none of them is used by the schedules.
dist._coalescing_manager = None
torch.jit.script = lambda f=None, *a, **k: f
torch.Tensor.cuda = lambda self, *a, **k: self
_zeros = torch.zeros
torch.zeros = lambda *a, **k: _zeros(*a, **{x: y for x, y in k.items() if x != "device"})

from megatron.core import parallel_state as ps  # noqa: E402
from megatron.core.pipeline_parallel import p2p_communication as p2p  # noqa: E402
from megatron.core.pipeline_parallel import schedules as s  # noqa: E402

events = []
PP = {"size": 1, "rank": 0, "vp": None, "vrank": None}


def first_stage(ignore_virtual=False):
    if not ignore_virtual and PP["vp"] is not None and PP["vrank"] != 0:
        return False
    return PP["rank"] == 0


def last_stage(ignore_virtual=False):
    if not ignore_virtual and PP["vp"] is not None and PP["vrank"] != PP["vp"] - 1:
        return False
    return PP["rank"] == PP["size"] - 1


def set_vrank(r):
    PP["vrank"] = r


ps.get_pipeline_model_parallel_world_size = lambda *a, **k: PP["size"]
ps.get_pipeline_model_parallel_rank = lambda *a, **k: PP["rank"]
ps.get_virtual_pipeline_model_parallel_world_size = lambda *a, **k: PP["vp"]
ps.get_virtual_pipeline_model_parallel_rank = lambda *a, **k: PP["vrank"]
ps.set_virtual_pipeline_model_parallel_rank = set_vrank
ps.is_pipeline_first_stage = first_stage
ps.is_pipeline_last_stage = last_stage
ps.get_context_parallel_world_size = lambda *a, **k: 1
ps.get_tensor_model_parallel_world_size = lambda *a, **k: 1

config = types.SimpleNamespace(
    overlap_p2p_comm=True, batch_p2p_comm=False, overlap_p2p_comm_warmup_flush=False,
    microbatch_group_size_per_vp_stage=None, finalize_model_grads_func=None, timers=None,
    no_sync_func=None, grad_sync_func=None, param_sync_func=None,
    num_microbatches_with_partial_activation_checkpoints=None, deallocate_pipeline_outputs=False,
    variable_seq_lengths=False, calculate_per_token_loss=False, enable_cuda_graph=False,
    defer_embedding_wgrad_compute=False, hidden_size=1, sequence_parallel=False)
s.get_model_config = lambda model: config
s.get_model_type = lambda model: None
s.get_model_xattn = lambda model: False


class Handle:
    def wait(self):
        pass


def fake_communicate(*, tensor_send_next, tensor_send_prev, recv_prev, recv_next,
                     wait_on_reqs=True, **k):
    ops, reqs = [], {}
    if tensor_send_next is not None:
        ops.append("Sn")
        reqs["send_next"] = Handle()
    if tensor_send_prev is not None:
        ops.append("Sp")
        reqs["send_prev"] = Handle()
    if recv_prev:
        ops.append("Rp")
        reqs["recv_prev"] = Handle()
    if recv_next:
        ops.append("Rn")
        reqs["recv_next"] = Handle()
    events.append("+".join(ops) or "-")
    t = torch.zeros(1)
    return (t if recv_prev else None), (t if recv_next else None), (None if wait_on_reqs else reqs)


p2p._communicate = fake_communicate


def fake_forward_step(forward_step_func, data_iterator, model, num_microbatches, input_tensor,
                      forward_data_store, config, *a, current_microbatch=None, **k):
    events.append("F%d.%d" % (PP["vrank"], current_microbatch))
    return [torch.tensor([float(PP["vrank"]), float(current_microbatch)])], torch.tensor(0)


def fake_backward_step(input_tensor, output_tensor, output_tensor_grad, model_type, config):
    t = output_tensor[0]
    assert int(t[0]) == PP["vrank"], "backward on another chunk than the forward's"
    events.append("B%d.%d" % (int(t[0]), int(t[1])))
    return [torch.zeros(1)]


s.forward_step = fake_forward_step
s.backward_step = fake_backward_step


def trace(pp, vp, n, m, overlap, forward_only, rank):
    PP.update(size=pp, rank=rank, vp=vp, vrank=0)
    config.overlap_p2p_comm = overlap
    config.batch_p2p_comm = not overlap
    config.microbatch_group_size_per_vp_stage = n
    events.clear()
    try:
        s.forward_backward_pipelining_with_interleaving(
            forward_step_func=None, data_iterator=[None] * vp, model=[torch.nn.Identity()] * vp,
            num_microbatches=m, seq_length=1, micro_batch_size=1, forward_only=forward_only)
    except (ValueError, RuntimeError) as e:
        return "error %s: %s" % (type(e).__name__, e)
    return " ".join(events)


CASES = []
for pp in (2, 3, 4):
    for vp in (2, 3):
        for m in (1, 2, 3, 4, 5, 6, 8, 9):
            CASES.append((pp, vp, pp, m))
CASES += [(2, 2, 3, 5), (2, 2, 3, 6), (2, 3, 4, 7), (3, 2, 4, 4), (2, 2, 2, 0)]

for pp, vp, n, m in CASES:
    for overlap in (True, False):
        for fo in (False, True):
            for r in range(pp):
                print("interleaved pp=%d vp=%d N=%d M=%d %s %s rank=%d : %s" % (
                    pp, vp, n, m, "overlap" if overlap else "batched",
                    "forward" if fo else "train", r, trace(pp, vp, n, m, overlap, fo, r)))
