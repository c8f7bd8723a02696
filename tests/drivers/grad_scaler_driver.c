/* Test helper for src/optimizer/grad_scaler.c: builds the grad scaler an optimizer config
 * gets and feeds it a found-inf sequence, printing its state after every update, for
 * tests/optimizer/test_grad_scaler.py to compare with Megatron's grad_scaler.py.
 *
 *   grad_scaler_driver FP16 BF16 MIXED LOSS_SCALE INITIAL MIN WINDOW HYSTERESIS FOUND_INF
 *
 * FP16/BF16/MIXED are 0 or 1 (MIXED: a MixedPrecisionOptimizer, i.e. fp16, bf16 or the
 * distributed optimizer), LOSS_SCALE 0 = None, FOUND_INF a string of 0/1 (one per step).
 * Output: "on DYNAMIC SCALE GROWTH HYSTERESIS" for the initial state, then one such line per
 * step (scale printed with %.17g: exact). A rejected config prints
 * "error: <message>" and exits 2. */
#include <stdio.h>
#include <stdlib.h>

#include "megatron/optimizer.h"

static void show(const struct mc_grad_scaler *g)
{
    struct mc_grad_scaler_state st;
    mc_grad_scaler_get_state(g, &st);
    printf("%d %d %.17g %lld %lld\n", g->on, g->dynamic, st.scale, (long long)st.growth_tracker,
           (long long)st.hysteresis_tracker);
}

int main(int argc, char **argv)
{
    if (argc != 10) {
        fprintf(stderr, "usage: grad_scaler_driver FP16 BF16 MIXED LOSS_SCALE INITIAL MIN WINDOW "
                        "HYSTERESIS FOUND_INF\n");
        return 2;
    }
    struct mc_optimizer_config c;
    mc_opt_config_default(&c);
    c.fp16 = atoi(argv[1]) != 0;
    c.bf16 = atoi(argv[2]) != 0;
    bool mixed = atoi(argv[3]) != 0;
    c.loss_scale = strtod(argv[4], NULL);
    c.initial_loss_scale = strtod(argv[5], NULL);
    c.min_loss_scale = strtod(argv[6], NULL);
    c.loss_scale_window = strtod(argv[7], NULL);
    c.hysteresis = strtoll(argv[8], NULL, 10);
    struct mc_grad_scaler g;
    if (mc_grad_scaler_init(&g, &c, mixed) != MC_OK) {
        printf("error: %s\n", mc_last_error());
        return 2;
    }
    show(&g);
    for (const char *p = argv[9]; *p; p++) {
        mc_grad_scaler_update(&g, *p == '1');
        show(&g);
    }
    return 0;
}
