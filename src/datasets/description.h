/* A small ordered JSON value tree printed exactly like Python's json.dumps(obj, indent=4):
 * the text Megatron hashes (MD5) to name its dataset caches (megatron_dataset.py,
 * blended_dataset.py). Private to src/datasets. */
#ifndef MC_DATASETS_DESCRIPTION_H
#define MC_DATASETS_DESCRIPTION_H

#include "megatron.h"

enum mc_json_kind { MC_JSON_NULL, MC_JSON_BOOL, MC_JSON_INT, MC_JSON_FLOAT, MC_JSON_STR,
                    MC_JSON_LIST, MC_JSON_OBJ };

struct mc_json {
    enum mc_json_kind kind;
    int64_t i;              /* INT, BOOL */
    double f;               /* FLOAT */
    char *s;                /* STR (owned copy) */
    int n, cap;             /* LIST / OBJ children */
    struct mc_json **items;
    char **keys;            /* OBJ only */
};

/* Constructors return NULL on allocation failure; adding a NULL child fails cleanly, so
 * callers can build a tree and check once (mc_json_add returns MC_ERR_NOMEM). */
struct mc_json *mc_json_null(void);
struct mc_json *mc_json_int(int64_t v);
struct mc_json *mc_json_float(double v);
struct mc_json *mc_json_str(const char *s); /* NULL s gives null */
struct mc_json *mc_json_list(void);
struct mc_json *mc_json_obj(void);
/* Takes ownership of v (freed on failure too). key NULL for lists. */
mc_status mc_json_add(struct mc_json *parent, const char *key, struct mc_json *v);
struct mc_json *mc_json_clone(const struct mc_json *v);
void mc_json_free(struct mc_json *v);
/* json.dumps(v, indent=4) with ensure_ascii; the text is mc_alloc'ed. */
mc_status mc_json_dump(const struct mc_json *v, char **out);

#endif
