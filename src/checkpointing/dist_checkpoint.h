/* Megatron's torch_dist checkpoints (dist_checkpoint.c). Private header of src/checkpointing/. */
#ifndef MC_CHECKPOINTING_DIST_CHECKPOINT_H
#define MC_CHECKPOINTING_DIST_CHECKPOINT_H

#include <stdio.h>

#include "checkpointing/torch_pickle.h"
#include "megatron/checkpoint.h"

/* Whether iter_dir is a torch_dist checkpoint (it has metadata.json). */
bool mc_dist_ckpt_is(const char *iter_dir);

/* This rank's state dict from the torch_dist checkpoint in iter_dir (after --dist-ckpt-strictness's
 * checks, whose warnings go to `log` when not NULL), in the form the torch-format
 * loader reads (args, iteration, model / model<v> with this stage's local names and this rank's
 * tensor-parallel shards, optimizer state by index with param_groups, opt_param_scheduler, ...),
 * whatever layout it was saved with. Tensors are owned by `d`. */
mc_status mc_dist_ckpt_read(mc_pk_doc *d, const struct mc_ckpt_state *s, const char *iter_dir,
                            FILE *log, struct mc_pk **sd);

/* A torch_dist checkpoint's global tensors for readers without a model (the checkpoint
 * converter): open parses iter_dir/.metadata (whitelisted classes, no code); the keys of
 * state_dict_metadata in order (tensor: a TensorStorageMetadata, else a sharded object); a
 * tensor's global shape (false: no such tensor); read copies the region [o, o+z) of the global
 * tensor `key` into dst as float32 (16-bit values widened exactly), every chunk checked against
 * its file. */
struct mc_dist_reader;
mc_status mc_dist_reader_open(const char *iter_dir, struct mc_dist_reader **out);
void mc_dist_reader_close(struct mc_dist_reader *x);
int64_t mc_dist_reader_count(const struct mc_dist_reader *x);
const char *mc_dist_reader_key(const struct mc_dist_reader *x, int64_t k, bool *tensor);
bool mc_dist_reader_shape(const struct mc_dist_reader *x, const char *key, int *nd, int64_t *g);
mc_status mc_dist_reader_read(struct mc_dist_reader *x, const char *key, const int64_t *o,
                              const int64_t *z, float *dst);

/* Where a parameter of model chunk m (its local name) lives in a torch_dist checkpoint: the
 * global key (TE names, layers stacked: "decoder.layers.mlp.linear_fc1.weight"; a tied output
 * layer is the word embedding) and the global layer on the prepended axis (-1 for none). */
struct mc_dist_place {
    char key[512];
    long layer;
};
mc_status mc_dist_ckpt_place(const mc_gpt_model *m, const char *local, struct mc_dist_place *p);

/* Writes this rank's part of a torch_dist checkpoint into the directory tmp_dir (every rank
 * its __<rank>_<k>.distcp files), then, on global rank 0 after every rank's items are known
 * (s->gather), .metadata, common.pt (the dict `common`, NULL on other ranks) and metadata.json.
 * `final_dir` is the directory tmp_dir becomes (named in .metadata's storage_meta). Every rank
 * must call it (it gathers); a rank that failed to write still joins the gather with `failed`
 * set, and every rank returns an error then. */
mc_status mc_dist_ckpt_write(const struct mc_ckpt_state *s, const char *tmp_dir,
                             const char *final_dir, mc_pk_doc *d, const struct mc_pk *common);

/* mc_dist_ckpt_write in its three steps, for --async-save (checkpoint.c): plan_init plans this
 * rank's items on the main thread (with `snapshot`, copies every tensor it writes into a block
 * the plan owns: the saved state may change afterwards); plan_write writes its .distcp files
 * into tmp_dir (file I/O only, no collective: safe on a writer thread); plan_finish, on the main
 * thread of every rank, gathers and writes the metadata as mc_dist_ckpt_write does (`st`: this
 * rank's outcome so far; `common` NULL: common.pt is written already). plan_init sets *out even
 * when it fails (NULL only when out of memory); plan_finish accepts either. */
struct mc_dist_ckpt_plan;
mc_status mc_dist_ckpt_plan_init(const struct mc_ckpt_state *s, bool snapshot,
                                 struct mc_dist_ckpt_plan **out);
mc_status mc_dist_ckpt_plan_write(struct mc_dist_ckpt_plan *p, const char *tmp_dir, int rank);
mc_status mc_dist_ckpt_plan_finish(const struct mc_ckpt_state *s, struct mc_dist_ckpt_plan *p,
                                   mc_status st, const char *tmp_dir, const char *final_dir,
                                   struct mc_pk_doc *d, const struct mc_pk *common);
void mc_dist_ckpt_plan_free(struct mc_dist_ckpt_plan *p);

/* A torch_dist checkpoint built item by item by a writer without a model or ranks (the
 * checkpoint converter writes every target rank's plan in one process): new; chunk adds a chunk
 * [off, off+sz) of the global tensor `key` (shape g, nd dimensions) whose contiguous values are
 * `data` (dtype dt, kept alive by the caller until the files are written); object adds the
 * sharded object `fqn` (its value, NULL for None, owned by the caller); seal orders the items
 * as Megatron's plan and splits them over the rank's two files; then mc_dist_ckpt_plan_write
 * per rank, and write_metadata once with every rank's plan in rank order (.metadata, common.pt,
 * metadata.json). */
mc_status mc_dist_ckpt_plan_new(struct mc_dist_ckpt_plan **out);
mc_status mc_dist_ckpt_plan_chunk(struct mc_dist_ckpt_plan *p, const char *key, int nd,
                                  const int64_t *g, const int64_t *off, const int64_t *sz,
                                  const void *data, enum mc_dtype dt);
mc_status mc_dist_ckpt_plan_object(struct mc_dist_ckpt_plan *p, const char *fqn,
                                   const struct mc_pk *value);
mc_status mc_dist_ckpt_plan_seal(struct mc_dist_ckpt_plan *p);
mc_status mc_dist_ckpt_write_metadata(struct mc_dist_ckpt_plan *const *plans, int world,
                                      const char *tmp_dir, const char *final_dir, mc_pk_doc *d,
                                      const struct mc_pk *common);

/* "rerun_state_machine_state/shard_<pp rank>.<tp rank>_<pp>.<tp>": the unique key of
 * RerunStateMachine.state_dict's ShardedObject in a torch_dist checkpoint. */
void mc_dist_ckpt_rerun_key(char *out, size_t n, int pp_rank, int tp_rank, int pp, int tp);

/* How many parameters (over the model chunks) reach into data-parallel rank dp_rank's shard of
 * the distributed optimizer: the entries of common.pt's optimizer 'param_state'. */
int64_t mc_dist_ckpt_distopt_params(const struct mc_ckpt_state *s, int dp_rank);

#endif
