/* zoe-train's configuration: flags, JSON (flags win), presets, validation messages (the
 * validation-set options among them), the learning-rate schedule against hand-computed values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testing.h"
#include "zoe/train.h"

static zoe_status parse(zoe_train_config *c, const char *line) {
    char buf[1024], *argv[64];
    int argc = 0;
    snprintf(buf, sizeof buf, "zoe-train %s", line);
    for (char *t = strtok(buf, " "); t && argc < 63; t = strtok(NULL, " ")) argv[argc++] = t;
    int help, list;
    zoe_train_config_defaults(c);
    return zoe_train_config_parse_args(c, argc, argv, &help, &list);
}

static void expect_error(const char *line, const char *fragment) {
    zoe_train_config c;
    zoe_status st = parse(&c, line);
    CHECK(st == ZOE_ERR_INVALID_ARGUMENT || st == ZOE_ERR_IO, "'%s' should fail", line);
    CHECK(strstr(zoe_last_error(), fragment) != NULL, "'%s': message '%s' lacks '%s'", line,
          zoe_last_error(), fragment);
}

static void expect_invalid(zoe_train_config *c, int world, const char *fragment) {
    CHECK(zoe_train_config_validate(c, world) == ZOE_ERR_INVALID_ARGUMENT,
          "validate should fail: %s", fragment);
    CHECK(strstr(zoe_last_error(), fragment) != NULL, "message '%s' lacks '%s'", zoe_last_error(),
          fragment);
}

/* --device-memory and zoe_parse_size: random whole and quarter amounts of every unit against
 * the bytes computed here, the texts that are not sizes, the JSON key as a number and as a
 * string, and the round trip through zoe_train_config_json (which writes the largest whole
 * binary unit). */
static void check_device_memory(const char *json) {
    static const struct {
        const char *unit;
        uint64_t bytes;
    } units[] = {{"", 1},
                 {"B", 1},
                 {"KiB", 1024},
                 {"kib", 1024},
                 {"MiB", 1 << 20},
                 {"GiB", 1ULL << 30},
                 {"TiB", 1ULL << 40},
                 {"K", 1024},
                 {"M", 1 << 20},
                 {"g", 1ULL << 30},
                 {"T", 1ULL << 40},
                 {"KB", 1000},
                 {"MB", 1000000},
                 {"GB", 1000000000},
                 {"TB", 1000000000000ULL}};
    test_rng rng;
    test_rng_seed(&rng, 512);
    for (int trial = 0; trial < 400; trial++) {
        const int u = (int)test_rng_int(&rng, 0, (int)(sizeof units / sizeof units[0]) - 1);
        const uint64_t whole = (uint64_t)test_rng_int(&rng, 0, 4096),
                       quarters = units[u].bytes % 4 == 0 ? (uint64_t)test_rng_int(&rng, 0, 3) : 0;
        char text[64];
        if (quarters)
            snprintf(text, sizeof text, "%llu.%02llu%s", (unsigned long long)whole,
                     (unsigned long long)(25 * quarters), units[u].unit);
        else
            snprintf(text, sizeof text, "%llu%s", (unsigned long long)whole, units[u].unit);
        const uint64_t want = whole * units[u].bytes + quarters * (units[u].bytes / 4);
        uint64_t got = 0;
        CHECK(zoe_parse_size(text, &got) && got == want, "'%s' is %llu bytes, read %llu", text,
              (unsigned long long)want, (unsigned long long)got);
    }
    static const char *const not_sizes[] = {"",      " 5MiB", "5 MiB",      "-1M", "5MiBs",
                                            "0x10",  "1e3K",  "MiB",        ".5G", "0.1KiB",
                                            "1.MiB", "5XB",   "20000000TiB"};
    for (size_t i = 0; i < sizeof not_sizes / sizeof not_sizes[0]; i++) {
        uint64_t got = 7;
        CHECK(!zoe_parse_size(not_sizes[i], &got) && got == 7, "'%s' is not a size", not_sizes[i]);
    }
    zoe_train_config c;
    CHECK_OK(parse(&c, "--device-memory 1.5GiB"));
    CHECK(c.device_memory == 3ULL << 29, "--device-memory 1.5GiB: %llu",
          (unsigned long long)c.device_memory);
    CHECK_OK(parse(&c, "--device-memory=auto"));
    CHECK(c.device_memory == 0, "auto is 0");
    zoe_train_config_defaults(&c);
    CHECK(c.device_memory == 0, "the default is auto (0)");
    expect_error("--device-memory 0", "--device-memory: '0' is not a size");
    expect_error("--device-memory 512XB", "--device-memory: '512XB' is not a size");
    expect_error("--device-memory -1", "--device-memory: '-1' is not a size");
    expect_error("--device-memory 1.5", "--device-memory: '1.5' is not a size");
    FILE *f = fopen(json, "w");
    fputs("{\"device_memory\": 536870912}", f);
    fclose(f);
    zoe_train_config_defaults(&c);
    CHECK_OK(zoe_train_config_load_json(&c, json));
    CHECK(c.device_memory == 512ULL << 20, "JSON number: %llu",
          (unsigned long long)c.device_memory);
    f = fopen(json, "w");
    fputs("{\"device-memory\": \"768KiB\"}", f);
    fclose(f);
    CHECK_OK(zoe_train_config_load_json(&c, json));
    char *text = zoe_train_config_json(&c);
    CHECK(c.device_memory == 768 << 10 && text && strstr(text, "\"device-memory\":\t\"768KiB\""),
          "JSON string: %llu, written back as %s", (unsigned long long)c.device_memory,
          text ? text : "(null)");
    free(text);
    f = fopen(json, "w");
    fputs("{\"device-memory\": true}", f);
    fclose(f);
    CHECK(zoe_train_config_load_json(&c, json) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "key \"device-memory\" needs a number of bytes"),
          "JSON true refused: %s", zoe_last_error());
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    char dir[] = "/tmp/zoe_cfg_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char data[256], json[256];
    snprintf(data, sizeof data, "%s/corpus.txt", dir);
    snprintf(json, sizeof json, "%s/run.json", dir);
    FILE *f = fopen(data, "w");
    fputs("hello\n", f);
    fclose(f);

    zoe_train_config c;
    char line[512];
    snprintf(line, sizeof line,
             "--model gpt2-124m --tp 2 --micro-batch=8 --lr 6e-4 --min-lr 6e-5 --dtype bf16 "
             "--recompute --data %s",
             data);
    CHECK_OK(parse(&c, line));
    CHECK(c.model.layers == 12 && c.model.hidden == 768 && c.tp == 2 && c.micro_batch == 8,
          "flags");
    CHECK(fabsf(c.lr - 6e-4f) < 1e-9f && c.dtype == ZOE_BF16 && c.recompute == 1,
          "lr, dtype, flag");
    CHECK_OK(zoe_train_config_validate(&c, 4));
    /* explicit shape options refine the preset whatever their order */
    CHECK_OK(parse(&c, "--layers 2 --model gpt2-124m"));
    CHECK(c.model.layers == 2 && c.model.hidden == 768, "--layers after preset: %d",
          c.model.layers);

    f = fopen(json, "w");
    fprintf(f,
            "{\"model\": \"demo\", \"micro_batch\": 3, \"grad-accum\": 2, \"lr\": 0.01,"
            " \"recompute\": true, \"data\": \"%s\", \"seed\": 77}",
            data);
    fclose(f);
    snprintf(line, sizeof line, "--config %s --lr 0.02", json);
    CHECK_OK(parse(&c, line));
    CHECK(c.micro_batch == 3 && c.grad_accum == 2 && c.recompute && c.seed == 77, "json keys");
    CHECK(fabsf(c.lr - 0.02f) < 1e-9f, "flags win over JSON: lr %g", (double)c.lr);

    expect_error("--bogus 3", "unknown option '--bogus'");
    expect_error("--steps 0", "--steps=0 is out of range");
    expect_error("--lr -1", "--lr=-1 is out of range");
    expect_error("--micro-batch 2.5", "'2.5' is not an integer");
    expect_error("--dtype fp64", "'fp64' is not fp32, bf16 or fp16");
    expect_error("--offload gpu", "'gpu' is not cpu, none or nvme");
    expect_error("--model gpt5", "unknown model 'gpt5'");
    expect_error("--tp", "option --tp needs a value");
    expect_error("--config /nonexistent.json", "cannot open config '/nonexistent.json'");
    f = fopen(json, "w");
    fputs("{\"micro-batch\": 2, \"wings\": 3}", f);
    fclose(f);
    snprintf(line, sizeof line, "--config %s", json);
    expect_error(line, "unknown key \"wings\"");

    snprintf(line, sizeof line, "--model gpt2-124m --data %s", data);
    CHECK_OK(parse(&c, line));
    c.tp = 3;
    expect_invalid(&c, 8, "--tp=3 does not divide the 8 ranks");
    c.tp = 8;
    expect_invalid(&c, 8, "--heads=12 is not divisible by --tp=8");
    c.tp = 1;
    c.model.hidden = 100;
    expect_invalid(&c, 1, "--hidden=100 is not divisible by --heads=12");
    c.model.hidden = 768;
    strcpy(c.data, "/nonexistent/corpus");
    expect_invalid(&c, 1, "'/nonexistent/corpus' is neither a file");
    strcpy(c.data, data);
    c.dtype = ZOE_F16;
    expect_invalid(&c, 1, "--dtype=fp16 needs --backend=cuda");
    c.dtype = ZOE_BF16;
    c.tf32 = 1;
    expect_invalid(&c, 1, "--tf32 is for --dtype=fp32 (got bf16)");
    c.tf32 = 0;
    c.backend = ZOE_BACKEND_CUDA;
    c.model.heads = 2;
    expect_invalid(&c, 1, "a head dim of 384; the CUDA attention kernels take at most 256");
    c.model.heads = 12, c.backend = ZOE_BACKEND_CPU, c.dtype = ZOE_F32;

    /* validation options: flags, JSON and a hand-filled struct share the table's checks */
    snprintf(line, sizeof line, "--split 98,2 --eval-every 50 --eval-iters 4 --data %s", data);
    CHECK_OK(parse(&c, line));
    CHECK(c.split_train == 98 && c.split_val == 2 && c.eval_every == 50 && c.eval_iters == 4,
          "--split %d,%d --eval-every %d --eval-iters %d", c.split_train, c.split_val, c.eval_every,
          c.eval_iters);
    CHECK_OK(zoe_train_config_validate(&c, 1));
    CHECK_OK(parse(&c, ""));
    CHECK(c.eval_every == 0 && c.eval_iters == 10 && !c.split_train && !c.val_data[0],
          "validation defaults: every %d, iters %d, split %d", c.eval_every, c.eval_iters,
          c.split_train);
    f = fopen(json, "w");
    fprintf(f, "{\"split\": \"90,10\", \"eval_every\": 7, \"data\": \"%s\"}", data);
    fclose(f);
    snprintf(line, sizeof line, "--config %s", json);
    CHECK_OK(parse(&c, line));
    CHECK(c.split_train == 90 && c.split_val == 10 && c.eval_every == 7, "JSON split %d,%d",
          c.split_train, c.split_val);
    char *text = zoe_train_config_json(&c); /* what trainer.json records reads back */
    CHECK(text && strstr(text, "\"split\":\t\"90,10\"") && strstr(text, "\"eval-every\":\t7"),
          "the configuration as JSON: %s", text ? text : "(null)");
    free(text);
    /* the JSON written reads back as a config to the same configuration (trainer.json's
     * "config" as --config): a seed above 2^53 exactly, an unset --init-from stays unset */
    c.seed = 9223372036854775809ULL, c.lr = 3.7e-4f, c.micro_batch = 5;
    text = zoe_train_config_json(&c);
    f = fopen(json, "w");
    fputs(text, f);
    fclose(f);
    zoe_train_config back;
    zoe_train_config_defaults(&back);
    CHECK_OK(zoe_train_config_load_json(&back, json));
    char *again = zoe_train_config_json(&back);
    CHECK(back.seed == c.seed && !back.init_from[0] && again && strcmp(text, again) == 0,
          "config JSON round trip: seed %llu, init-from '%s'\n%s\n---\n%s",
          (unsigned long long)back.seed, back.init_from, text, again ? again : "(null)");
    free(text), free(again);
    expect_error("--split 98", "'98' is not two percentages T,V summing to 100");
    expect_error("--split 98,x", "'98,x' is not two percentages");
    expect_error("--split 60,60", "--split=60,60 is not two positive percentages summing to 100");
    zoe_train_config_defaults(&c);
    c.split_train = 60, c.split_val = 30;
    expect_invalid(&c, 1, "--split=60,30 is not two positive percentages summing to 100");
    c.split_train = 0, c.split_val = 0, c.eval_every = 5;
    expect_invalid(&c, 1, "--eval-every=5 without a validation set");
    snprintf(c.val_data, sizeof c.val_data, "%s", data);
    CHECK_OK(zoe_train_config_validate(&c, 1));
    c.split_train = 98, c.split_val = 2;
    expect_invalid(&c, 1, "are two validation sets: give one");
    c.split_train = c.split_val = 0, c.eval_iters = 0;
    expect_invalid(&c, 1, "--eval-iters=0 is out of range");

    /* compressed optimizer state: int8 for the moments only, the gradient partition in the
     * compute dtype for one micro-batch a step, and every schedule over it */
    snprintf(line, sizeof line,
             "--data %s --dtype bf16 --main-params-dtype bf16 --exp-avg-dtype int8 "
             "--exp-avg-sq-dtype=int8 --main-grads-dtype bf16",
             data);
    CHECK_OK(parse(&c, line));
    CHECK(c.exp_avg_dtype == ZOE_STATE_INT8 && c.exp_avg_sq_dtype == ZOE_STATE_INT8 &&
              c.main_params_dtype == ZOE_STATE_BF16 && c.main_grads_dtype == ZOE_BF16,
          "state dtypes %d %d %d, gradient %d", c.main_params_dtype, c.exp_avg_dtype,
          c.exp_avg_sq_dtype, (int)c.main_grads_dtype);
    CHECK_OK(zoe_train_config_validate(&c, 1)); /* the exact schedule: synchronous with int8 */
    c.grad_accum = 2;
    expect_invalid(&c, 1, "--main-grads-dtype=bf16 with --grad-accum=2");
    c.grad_accum = 1, c.dtype = ZOE_F32;
    expect_invalid(&c, 1, "--main-grads-dtype=bf16 with --dtype=fp32");
    c.dtype = ZOE_BF16, c.dpu_schedule = ZOE_DPU_DC; /* compensates a widened fp32 copy */
    CHECK_OK(zoe_train_config_validate(&c, 1));
    c.main_grads_dtype = ZOE_F32;
    CHECK_OK(zoe_train_config_validate(&c, 1));
    c.dpu_schedule = ZOE_DPU_PREDICT; /* predicts from the state as stored */
    CHECK_OK(zoe_train_config_validate(&c, 1));
    c.dpu_schedule = ZOE_DPU_EXACT, c.main_params_dtype = ZOE_STATE_INT8;
    expect_invalid(&c, 1, "--main-params-dtype=int8: the master weights are fp32 or bf16");
    expect_error("--exp-avg-dtype int4", "int4");
    expect_error("--main-grads-dtype int8", "--main-grads-dtype: 'int8' is not fp32, bf16 or fp16");

    /* lr: warm-up 10 to 1e-3, cosine to 1e-4 at step 110 */
    zoe_train_config s;
    zoe_train_config_defaults(&s);
    s.lr = 1e-3f, s.min_lr = 1e-4f, s.warmup = 10, s.steps = 110;
    CHECK(fabsf(zoe_train_lr_at(&s, 0) - 1e-4f) < 1e-9f, "warm-up step 0");
    CHECK(fabsf(zoe_train_lr_at(&s, 9) - 1e-3f) < 1e-9f, "warm-up end");
    CHECK(fabsf(zoe_train_lr_at(&s, 60) - 5.5e-4f) < 1e-8f, "cosine midpoint %g",
          (double)zoe_train_lr_at(&s, 60));
    CHECK(fabsf(zoe_train_lr_at(&s, 110) - 1e-4f) < 1e-9f, "cosine end");

    /* presets: the parameter counts of known shapes */
    zoe_model_config m;
    CHECK_OK(zoe_model_preset("gpt2-124m", &m));
    CHECK(zoe_model_param_count(&m) == 124439808LL, "gpt2-124m has %lld parameters",
          (long long)zoe_model_param_count(&m));
    CHECK_OK(zoe_model_preset("70b", &m));
    CHECK(llabs(zoe_model_param_count(&m) - 70400000000LL) < 600000000LL, "70b: %lld",
          (long long)zoe_model_param_count(&m));

    check_device_memory(json);
    unlink(data), unlink(json), rmdir(dir);
    return test_finish("test_config");
}
