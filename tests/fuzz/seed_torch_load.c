/* Writes one small torch.save file with our writer (mc_torch_save) as a fuzzing seed: a
 * Namespace, an OrderedDict of float32/half tensors including a strided view, bytes, an enum.
 * Usage: seed_torch_load OUT.pt (built by tests/fuzz/CMakeLists.txt, run by long_run.sh). */
#include <stdio.h>

#include "checkpointing/torch_pickle.h"

int main(int argc, char **argv)
{
    static float w[6] = {1, 2, 3, 4, 5, 6};
    static uint16_t h[2] = {0x3c00, 0x4000};
    mc_pk_doc *d;
    if (argc != 2 || mc_pk_doc_init(&d))
        return 2;
    struct mc_pk *root = mc_pk_new(d, MC_PK_DICT), *ns = mc_pk_new(d, MC_PK_NAMESPACE);
    struct mc_pk *s = mc_pk_storage(d, MC_DTYPE_F32, 6, w), *od = mc_pk_new(d, MC_PK_ODICT);
    int64_t shape[2] = {2, 3}, vs[1] = {2}, vst[1] = {3}, hs[1] = {2};
    mc_pk_set(d, od, "w", mc_pk_tensor(d, s, 0, 2, shape, NULL));
    mc_pk_set(d, od, "col", mc_pk_tensor(d, s, 1, 1, vs, vst));
    mc_pk_set(d, od, "h", mc_pk_tensor(d, mc_pk_storage(d, MC_DTYPE_F16, 2, h), 0, 1, hs, NULL));
    mc_pk_set(d, od, "x._extra_state", mc_pk_none(d));
    mc_pk_set(d, ns, "num_layers", mc_pk_int(d, 12));
    mc_pk_set(d, ns, "lr", mc_pk_float(d, 6e-4));
    mc_pk_set(d, ns, "dt", mc_pk_global(d, "torch", "float32"));
    mc_pk_set(d, ns, "be", mc_pk_enum_member(d, "megatron.core.transformer.enums", "AttnBackend", "auto"));
    mc_pk_set(d, root, "args", ns);
    mc_pk_set(d, root, "model", od);
    mc_pk_set(d, root, "bytes", mc_pk_bytes(d, "\x01\xfe", 2));
    mc_status st = mc_torch_save(d, root, argv[1]);
    mc_pk_doc_free(d);
    return st ? 1 : 0;
}
