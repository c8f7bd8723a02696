"""Writes schedules_golden.txt: the per-rank order of forward steps, backward steps and
point-to-point exchanges of Megatron-LM core_v0.12.1's own schedule functions
(forward_backward_no_pipelining, forward_backward_pipelining_without_interleaving), run in
one Python process with the model, the data and the communication stubbed out.

Usage: /usr/bin/python3 make_schedules_golden.py /path/to/Megatron-LM > schedules_golden.txt

Each line: `<schedule> pp=<P> rank=<r> M=<micro-batches> <train|forward> : <events>`, where an
event is F<k> (forward of micro-batch k), B<k> (backward of micro-batch k) or one exchange
with the neighbours, spelled by what it does: Sn = send to the next stage, Sp = send to the
previous stage, Rp = receive from the previous stage, Rn = receive from the next stage,
joined by '+' when Megatron batches them into one exchange. Exchanges that Megatron skips at
the pipeline's ends (recv_forward on the first stage, ...) do not appear."""
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
PP = {"size": 1, "rank": 0}
ps.get_pipeline_model_parallel_world_size = lambda *a, **k: PP["size"]
ps.get_pipeline_model_parallel_rank = lambda *a, **k: PP["rank"]
ps.is_pipeline_first_stage = lambda *a, **k: PP["rank"] == 0
ps.is_pipeline_last_stage = lambda *a, **k: PP["rank"] == PP["size"] - 1

config = types.SimpleNamespace(
    overlap_p2p_comm=False, batch_p2p_comm=True, finalize_model_grads_func=None, timers=None,
    no_sync_func=None, grad_sync_func=None, num_microbatches_with_partial_activation_checkpoints=None,
    deallocate_pipeline_outputs=False, variable_seq_lengths=False, calculate_per_token_loss=False,
    enable_cuda_graph=False, defer_embedding_wgrad_compute=False)
s.get_model_config = lambda model: config
s.get_model_type = lambda model: None
s.get_model_xattn = lambda model: False
s.get_tensor_shapes = lambda **k: [(1,)]


def fake_communicate(*, tensor_send_next, tensor_send_prev, recv_prev, recv_next, **k):
    ops = []
    if tensor_send_next is not None:
        ops.append("Sn")
    if tensor_send_prev is not None:
        ops.append("Sp")
    if recv_prev:
        ops.append("Rp")
    if recv_next:
        ops.append("Rn")
    events.append("+".join(ops))
    t = torch.zeros(1)
    return (t if recv_prev else None), (t if recv_next else None), None


p2p._communicate = fake_communicate


def fake_forward_step(forward_step_func, data_iterator, model, num_microbatches, input_tensor,
                      forward_data_store, config, *a, current_microbatch=None, **k):
    events.append("F%d" % current_microbatch)
    return [torch.tensor([float(current_microbatch)])], 0


def fake_backward_step(input_tensor, output_tensor, output_tensor_grad, model_type, config):
    events.append("B%d" % int(output_tensor[0][0]))
    return [torch.zeros(1)]


s.forward_step = fake_forward_step
s.backward_step = fake_backward_step


def trace(fn, pp, rank, m, forward_only):
    PP["size"], PP["rank"] = pp, rank
    events.clear()
    fn(forward_step_func=None, data_iterator=None, model=[None], num_microbatches=m,
       seq_length=1, micro_batch_size=1, forward_only=forward_only)
    return " ".join(events)


for m in (1, 2, 3, 5):
    for fo in (False, True):
        print("no_pipelining pp=1 rank=0 M=%d %s : %s" % (
            m, "forward" if fo else "train",
            trace(s.forward_backward_no_pipelining, 1, 0, m, fo)))
for pp in (2, 3, 4):
    for m in (1, 2, 3, 4, 5, 8):
        for fo in (False, True):
            for r in range(pp):
                print("1f1b pp=%d rank=%d M=%d %s : %s" % (
                    pp, r, m, "forward" if fo else "train",
                    trace(s.forward_backward_pipelining_without_interleaving, pp, r, m, fo)))
