/* --yaml-cfg: the arguments namespace read from a YAML file. Megatron-LM counterpart:
 * megatron/training/yaml_arguments.py and the yaml branch of parse_args (core_v0.12.1).
 *
 * The reader accepts a strict YAML subset (block mappings by indentation, scalars, flow and
 * block lists, comments, ${VAR} environment substitution); anything else is an error naming
 * file:line. */
#ifndef MC_TRAINING_YAML_CFG_H
#define MC_TRAINING_YAML_CFG_H

#include <stdio.h>

#include "training/args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* When (*a)'s yaml_cfg is set: refuses --use-legacy-models, prints Megatron's warning to `out`
 * (may be NULL), replaces *a by a namespace of defaults (keeping the megatron.c extension
 * options given on the command line, such as --dry-run) and sets every key of the file as the
 * option of that dest, flattening the language_model: and model_parallel: sections. TP and PP
 * are clamped to the world size as validate_yaml does. On failure (*a)->err / err_kind /
 * exit_code describe the error. No-op when yaml_cfg is None. */
MC_API mc_status mc_yaml_cfg_apply(struct mc_args **a, FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* MC_TRAINING_YAML_CFG_H */
