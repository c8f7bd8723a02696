/* The run's queue of asynchronous checkpoint saves (megatron/training/async_utils.py,
 * Megatron-LM core_v0.12.1): one queue for the process (Megatron's _async_calls_queue
 * singleton), maybe_finalize_async_save at the start of every iteration (non-blocking) and at
 * the end of train() and of pretrain() (blocking). --use-persistent-ckpt-worker changes nothing
 * here: the writer is a thread either way (Megatron's choice between forking a process per save
 * and keeping one worker process). */
#include "training/checkpointing.h"

#include "checkpointing/async_utils.h"
#include "training/trainer.h"

static struct mc_async_queue queue; /* the main thread's only */

struct mc_async_queue *mc_train_async_queue(void) { return &queue; }

mc_status mc_train_maybe_finalize_async_save(const struct mc_args *a, bool blocking)
{
    if (!mc_args_bool(a, MC_A_async_save))
        return MC_OK;
    if (blocking && mc_async_queue_unfinalized(&queue))
        mc_print_rank_0("Unfinalized async checkpoint saves. Finalizing them synchronously now.\n");
    mc_status st = mc_async_queue_maybe_finalize(&queue, blocking);
    fflush(stdout);
    return st;
}

void mc_train_async_save_abandon(void) { mc_async_queue_abandon(&queue); }
