/* Every public function checks its handle: with NULL, a call that returns a zoe_status fails
 * with a message (never a crash), a pure getter answers its documented "none" value, and a
 * destroy does nothing. */
#include <string.h>
#include "testing.h"
#include "zoe/zoe.h"

static int calls;

static void refuses(zoe_status st, const char *call) {
    calls++;
    CHECK(st != ZOE_OK, "%s with a NULL handle returned ZOE_OK", call);
    CHECK(zoe_last_error()[0] != '\0', "%s with a NULL handle left no message", call);
}
#define REFUSES(call) refuses((call), #call)

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    int32_t tok[4] = {1, 2, 3, 4};
    float f[4] = {0};
    char text[8] = "abc";
    size_t n = 0;
    int64_t a = 0, b = 0;
    void *p = NULL;

    /* the trainer and the configuration */
    REFUSES(zoe_trainer_flush(NULL));
    REFUSES(zoe_trainer_finalize(NULL));
    REFUSES(zoe_trainer_step(NULL, 1e-3f, NULL));
    REFUSES(zoe_trainer_micro_batch(NULL, tok, tok, NULL));
    REFUSES(zoe_trainer_profile(NULL, NULL, 0));
    REFUSES(zoe_trainer_eval_begin(NULL));
    REFUSES(zoe_trainer_eval_micro_batch(NULL, tok, tok));
    REFUSES(zoe_trainer_eval_end(NULL, f));
    REFUSES(zoe_trainer_create(MPI_COMM_WORLD, NULL, NULL));
    REFUSES(zoe_train_config_validate(NULL, 1));
    REFUSES(zoe_train_config_load_json(NULL, "x.json"));
    REFUSES(zoe_train_config_defaults_for(NULL, sizeof(zoe_train_config), ZOE_API_VERSION));
    REFUSES(zoe_progress_report(NULL, NULL));
    REFUSES(zoe_progress_create(NULL, ZOE_PROGRESS_LINES, 1, 1, "", NULL));
    CHECK(zoe_trainer_param_count(NULL) == -1 && zoe_trainer_rank(NULL) == -1 &&
              zoe_trainer_dp_rank(NULL) == -1 && zoe_trainer_dp_size(NULL) == -1,
          "trainer getters");
    zoe_trainer_destroy(NULL);
    zoe_progress_destroy(NULL);

    /* the optimizer */
    REFUSES(zoe_optimizer_step(NULL, 1e-3f));
    REFUSES(zoe_optimizer_flush(NULL));
    REFUSES(zoe_optimizer_begin_micro_batch(NULL));
    REFUSES(zoe_optimizer_end_micro_batch(NULL));
    REFUSES(zoe_optimizer_grad_buffer(NULL, 0, &p));
    REFUSES(zoe_optimizer_grad_ready(NULL, 0));
    REFUSES(zoe_optimizer_init_from_params(NULL));
    REFUSES(zoe_optimizer_refresh_params(NULL));
    REFUSES(zoe_optimizer_set_step(NULL, 1));
    REFUSES(zoe_optimizer_stats_get(NULL, NULL));
    REFUSES(zoe_optimizer_tensor_offset(NULL, 0, &n));
    REFUSES(zoe_optimizer_tensor_shard(NULL, 0, &n, &n, &n));
    REFUSES(zoe_optimizer_read_state(NULL, ZOE_STATE_MASTER, 0, 1, f));
    REFUSES(zoe_optimizer_write_state(NULL, ZOE_STATE_MASTER, 0, 1, f));
    REFUSES(zoe_optimizer_config_default_for(NULL, sizeof(zoe_optimizer_config), ZOE_API_VERSION));
    CHECK(zoe_optimizer_params(NULL) == NULL && zoe_optimizer_params_numel(NULL) == 0 &&
              zoe_optimizer_partition_numel(NULL) == 0 &&
              zoe_optimizer_params_dtype(NULL) == ZOE_F32 && !zoe_optimizer_params_on_host(NULL),
          "optimizer getters");
    zoe_optimizer_destroy(NULL);

    /* the runtime */
    REFUSES(zoe_grid_create(MPI_COMM_WORLD, 1, NULL));
    CHECK(zoe_grid_rank(NULL) == -1 && zoe_grid_world_size(NULL) == -1 &&
              zoe_grid_tp_size(NULL) == -1 && zoe_grid_dp_size(NULL) == -1 &&
              zoe_grid_tp_rank(NULL) == -1 && zoe_grid_dp_rank(NULL) == -1 &&
              zoe_grid_local_rank(NULL) == -1 && zoe_grid_local_size(NULL) == -1,
          "grid getters");
    CHECK(zoe_grid_world_comm(NULL) == MPI_COMM_NULL && zoe_grid_tp_comm(NULL) == MPI_COMM_NULL &&
              zoe_grid_dp_comm(NULL) == MPI_COMM_NULL,
          "grid communicators");
    zoe_grid_destroy(NULL);
    REFUSES(zoe_comm_all_reduce(NULL, f, f, 1, ZOE_F32, ZOE_REDUCE_SUM, NULL));
    REFUSES(zoe_comm_all_gather(NULL, f, f, 1, ZOE_F32, NULL));
    REFUSES(zoe_comm_broadcast(NULL, f, 1, ZOE_F32, 0, NULL));
    REFUSES(zoe_comm_barrier(NULL, NULL));
    REFUSES(zoe_comm_create_mpi(MPI_COMM_WORLD, NULL));
    CHECK(zoe_comm_rank(NULL) == -1 && zoe_comm_size(NULL) == -1 && zoe_comm_bytes(NULL) == 0 &&
              zoe_comm_seconds(NULL) == 0.0 && strcmp(zoe_comm_backend_name(NULL), "none") == 0,
          "comm getters");
    zoe_comm_reset_bytes(NULL);
    zoe_comm_destroy(NULL);
    REFUSES(zoe_device_create(ZOE_BACKEND_CPU, 0, NULL));
    REFUSES(zoe_device_alloc(NULL, 16, &p));
    REFUSES(zoe_stream_create(NULL, NULL));
    REFUSES(zoe_event_create(NULL, NULL));
    REFUSES(zoe_device_synchronize(NULL));
    CHECK(zoe_device_ordinal(NULL) == -1 && zoe_stream_native(NULL) == NULL &&
              zoe_stream_device(NULL) == NULL,
          "device getters");
    zoe_device_destroy(NULL);
    zoe_stream_destroy(NULL);
    zoe_event_destroy(NULL);
    REFUSES(zoe_topology_place(NULL, 0, 1, -1, NULL));
    REFUSES(zoe_topology_bind(NULL, NULL));
    REFUSES(zoe_topology_load_host(NULL));
    CHECK(zoe_topology_num_cores(NULL) == 0 && zoe_topology_num_numa(NULL) == 0 &&
              zoe_topology_num_gpus(NULL) == 0,
          "topology getters");
    zoe_topology_destroy(NULL);

    /* data */
    REFUSES(zoe_tokenizer_encode(NULL, text, 3, tok, 4, &n));
    REFUSES(zoe_tokenizer_decode(NULL, tok, 1, text, sizeof text, &n));
    REFUSES(zoe_tokenizer_create_bytes(NULL));
    REFUSES(zoe_dataset_open(NULL, NULL));
    REFUSES(zoe_dataset_subset(NULL, 0, 1, NULL));
    REFUSES(zoe_dataset_split_documents(10, 90, 10, NULL));
    REFUSES(zoe_dataset_read(NULL, 0, 1, tok));
    REFUSES(zoe_dataset_document(NULL, 0, &a, &b));
    CHECK(zoe_dataset_name(NULL) == NULL && zoe_dataset_tokens(NULL) == -1 &&
              zoe_dataset_documents(NULL) == -1 && zoe_dataset_sequences(NULL) == -1,
          "dataset getters");
    zoe_dataset_destroy(NULL);
    REFUSES(zoe_dataset_writer_create(NULL, ZOE_TOKENS_UINT16, NULL));
    REFUSES(zoe_dataset_writer_add_document(NULL, tok, 1));
    REFUSES(zoe_dataset_writer_add_text(NULL, NULL, text, 3, ZOE_SPLIT_LINE));
    REFUSES(zoe_dataset_writer_add_text_file(NULL, NULL, "x.txt", ZOE_SPLIT_LINE));
    REFUSES(zoe_dataset_writer_finish(NULL));
    CHECK(zoe_dataset_writer_documents(NULL) == -1 && zoe_dataset_writer_tokens(NULL) == -1,
          "writer getters");
    zoe_dataset_writer_destroy(NULL);
    REFUSES(zoe_loader_create(NULL, NULL, NULL));
    zoe_loader_config lc = {.seq_len = 4, .micro_batch = 1, .dp_size = 1, .grad_accum = 1};
    zoe_loader *loader = NULL;
    REFUSES(zoe_loader_create(NULL, &lc, &loader));
    REFUSES(zoe_loader_fetch(NULL, 0, 0, tok, tok));
    REFUSES(zoe_loader_sequence_index(NULL, 0, 0, 0, &a));
    zoe_loader_destroy(NULL);
    if (test_rank() == 0) printf("%d calls refused a NULL handle\n", calls);
    return test_finish("test_null_handles");
}
