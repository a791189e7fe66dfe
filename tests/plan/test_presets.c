/* Every preset runs at each of its documented grids: the configuration validates at
 * tp x dp ranks with the documented micro-batch and recompute (heads, hidden and MLP width
 * divide by tp), and the plan accepts it. The 70b preset runs on a DGX-2 at TP=16. */
#include <string.h>
#include "testing.h"
#include "zoe/plan.h"
#include "zoe/train.h"

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    int runs = 0;
    for (int i = 0; i < zoe_model_preset_count(); i++) {
        const zoe_model_config *m = zoe_model_preset_at(i);
        CHECK(m->grids[0].tp > 0, "%s documents no grid", m->name);
        for (int g = 0; g < ZOE_MODEL_MAX_GRIDS && m->grids[g].tp; g++) {
            const zoe_model_grid *run = &m->grids[g];
            zoe_train_config cfg;
            zoe_train_config_defaults(&cfg);
            cfg.model = *m;
            cfg.tp = run->tp;
            cfg.micro_batch = run->micro_batch;
            cfg.recompute = run->recompute;
            CHECK(run->dp >= 1 && run->micro_batch >= 1, "%s grid %d: dp=%d micro-batch=%d",
                  m->name, g, run->dp, run->micro_batch);
            zoe_status st = zoe_train_config_validate(&cfg, run->tp * run->dp);
            CHECK(st == ZOE_OK, "%s at TP=%d x DP=%d: %s", m->name, run->tp, run->dp,
                  zoe_last_error());
            /* the plan describes the model at that grid (it builds the TP shards) */
            zoe_plan_config pc;
            zoe_hardware hw;
            CHECK_OK(zoe_hardware_preset("dgx2", &hw));
            CHECK_OK(zoe_plan_config_from_train(&cfg, run->tp * run->dp, &hw, &pc));
            pc.dtype = hw.dtype;
            zoe_plan_result r;
            CHECK_OK(zoe_plan(&pc, &r));
            CHECK(r.params == zoe_model_param_count(m), "%s: plan counts %lld parameters", m->name,
                  (long long)r.params);
            runs++;
        }
    }
    CHECK(runs >= zoe_model_preset_count(), "only %d documented runs", runs);

    /* the headline preset: TP=16 with whole heads of a stated size on every rank */
    zoe_model_config m;
    CHECK_OK(zoe_model_preset("70b", &m));
    CHECK(m.heads % 16 == 0 && m.hidden / m.heads == 144, "70b: %d heads of %d", m.heads,
          m.hidden / m.heads);
    CHECK(m.grids[0].tp == 16 && m.grids[0].dp == 1, "70b documented at TP=%d x DP=%d",
          m.grids[0].tp, m.grids[0].dp);
    return test_finish("test_presets");
}
