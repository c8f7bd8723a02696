/* --yaml-cfg files (src/training/yaml_cfg.c: the YAML subset reader and the mapping of its keys
 * onto Megatron's options): the input is the file, applied as pretrain_gpt does after parsing
 * `--yaml-cfg FILE`; a namespace that results is printed as --dry-run's dump does. */
#include "fuzz_common.h"
#include "training/args.h"
#include "training/yaml_cfg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *null;
    if (!null && !(null = fopen("/dev/null", "w")))
        abort();
    setenv("MC_YAML_CACHE", "/tmp/cache", 0); /* the ${VAR} of the tiny_gpt.yaml seed */
    char path[256];
    mc_fuzz_write("cfg.yaml", data, size, path, sizeof(path));
    char *argv[] = {"pretrain_gpt", "--yaml-cfg", path, NULL};
    struct mc_args *a;
    if (mc_args_init(&a) != MC_OK)
        abort();
    if (mc_args_parse(a, 3, argv) != MC_OK)
        abort(); /* the command line itself is valid */
    if (mc_fuzz_report("yaml", mc_yaml_cfg_apply(&a, NULL)) == MC_OK)
        mc_args_print_dump(null, a);
    else
        mc_fuzz_touch(a->err, strlen(a->err));
    mc_args_free(a);
    return 0;
}
