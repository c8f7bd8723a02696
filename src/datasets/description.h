/* A small ordered JSON value tree printed exactly like Python's json.dumps(obj, indent=4):
 * the text Megatron hashes (MD5) to name its dataset caches (megatron_dataset.py,
 * blended_dataset.py). Private to src/datasets. */
#ifndef MC_DATASETS_DESCRIPTION_H
#define MC_DATASETS_DESCRIPTION_H

#include "megatron.h"

enum mc_desc_kind { MC_DESC_NULL, MC_DESC_BOOL, MC_DESC_INT, MC_DESC_FLOAT, MC_DESC_STR,
                    MC_DESC_LIST, MC_DESC_OBJ };

struct mc_desc {
    enum mc_desc_kind kind;
    int64_t i;              /* INT, BOOL */
    double f;               /* FLOAT */
    char *s;                /* STR (owned copy) */
    int n, cap;             /* LIST / OBJ children */
    struct mc_desc **items;
    char **keys;            /* OBJ only */
};

/* Constructors return NULL on allocation failure; adding a NULL child fails cleanly, so
 * callers can build a tree and check once (mc_desc_add returns MC_ERR_NOMEM). */
struct mc_desc *mc_desc_null(void);
struct mc_desc *mc_desc_int(int64_t v);
struct mc_desc *mc_desc_float(double v);
struct mc_desc *mc_desc_str(const char *s); /* NULL s gives null */
struct mc_desc *mc_desc_list(void);
struct mc_desc *mc_desc_obj(void);
/* Takes ownership of v (freed on failure too). key NULL for lists. */
mc_status mc_desc_add(struct mc_desc *parent, const char *key, struct mc_desc *v);
struct mc_desc *mc_desc_clone(const struct mc_desc *v);
void mc_desc_free(struct mc_desc *v);
/* json.dumps(v, indent=4) with ensure_ascii; the text is mc_alloc'ed. */
mc_status mc_desc_dump(const struct mc_desc *v, char **out);

#endif
