/* A save that runs out of room (here: RLIMIT_FSIZE, which fails the reservation of a file past
 * the limit with EFBIG as a full disk fails it with ENOSPC) leaves no step-N.partial directory
 * behind, keeps latest and the complete checkpoint before it, says how much room the checkpoint
 * needs, and a save after room is made again succeeds. So does a save whose writes report
 * success and write nothing (test hook ZOE_CKPT_TEST_LOSE_WRITES): the read-back finds it. At 1
 * and 2 ranks (every rank's writes are limited). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "ckpt_test.h"
#include "runtime/error.h"

enum { FIRST_SAVE = 2, FAILED_SAVE = 4 };

static int exists(const char *dir, const char *name) {
    char p[600];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0;
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: test_ckpt_full_disk CORPUS\n");
        return 2;
    }
    char root[256];
    ckpt_test_tmpdir(MPI_COMM_WORLD, root, sizeof root);
    zoe_train_config c;
    ckpt_test_config(&c, 1, test_world_size(), 1, 0.0f, 0);
    ckpt_session s;
    float loss[FAILED_SAVE + 1];
    if (!CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &c, argv[1])))
        return test_finish("test_ckpt_full_disk");
    CHECK_OK(ckpt_session_steps(&s, FIRST_SAVE, loss));
    CHECK_OK(zoe_trainer_save(s.tr, root, 0, NULL, 0));
    CHECK_OK(ckpt_session_steps(&s, FAILED_SAVE, loss));

    /* 64 KiB: below the model file of this GPT (about 0.5 MB), above everything else. */
    unsigned long long limit = test_file_size_limit(64 << 10);
    zoe_status st = zoe_trainer_save(s.tr, root, 0, NULL, 0);
    test_file_size_limit(limit);
    const char *msg = zoe_last_error();
    CHECK(st != ZOE_OK, "the save past the file-size limit succeeded");
    CHECK(strstr(msg, "step-00000004.partial removed") && strstr(msg, "the checkpoint needs"),
          "the message does not say what was removed and how much room is needed: %s", msg);
    /* the file whose bytes could not be reserved (the model file, the first), with the bytes it
     * needs and the bytes free; the same message on every rank */
    CHECK(strstr(msg, "cannot reserve the bytes of") &&
              strstr(msg, "step-00000004.partial/model.safetensors") &&
              strstr(msg, "bytes are free on its file system"),
          "the message does not name the file, bytes needed and free: %s", msg);
    MPI_Barrier(MPI_COMM_WORLD);
    if (test_rank() == 0) {
        printf("failed save: %s\n", msg);
        CHECK(!exists(root, "step-00000004.partial"), "step-00000004.partial left behind");
        CHECK(exists(root, "step-00000002/trainer.json"), "the earlier checkpoint is gone");
        char latest[600], resolved[600];
        snprintf(latest, sizeof latest, "%s", root);
        CHECK_OK(zoe_checkpoint_resolve(latest, resolved, sizeof resolved));
        CHECK(strstr(resolved, "step-00000002") != NULL, "latest resolves to %s", resolved);
    }
    /* writes that report success and write nothing (as OMPIO's can on a full disk): the
     * read-back finds the hole before latest moves */
    setenv("ZOE_CKPT_TEST_LOSE_WRITES", "1", 1);
    st = zoe_trainer_save(s.tr, root, 0, NULL, 0);
    unsetenv("ZOE_CKPT_TEST_LOSE_WRITES");
    msg = zoe_last_error();
    CHECK(st != ZOE_OK, "a save whose writes were lost succeeded");
    CHECK(strstr(msg, "step-00000004.partial/model.safetensors: tensor ") &&
              strstr(msg, "a write was lost") && strstr(msg, "step-00000004.partial removed"),
          "the lost write is not named: %s", msg);
    MPI_Barrier(MPI_COMM_WORLD);
    if (test_rank() == 0) {
        CHECK(!exists(root, "step-00000004.partial"), "step-00000004.partial left behind");
        CHECK(!exists(root, "step-00000004"), "a checkpoint with lost writes was committed");
    }
    /* room again: the same step saves */
    CHECK_OK(zoe_trainer_save(s.tr, root, 0, NULL, 0));
    MPI_Barrier(MPI_COMM_WORLD);
    if (test_rank() == 0)
        CHECK(exists(root, "step-00000004/trainer.json"), "the save after room was made failed");
    ckpt_session_close(&s);
    MPI_Barrier(MPI_COMM_WORLD);
    if (test_rank() == 0) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", root);
        CHECK(system(cmd) == 0, "cleanup");
    }
    return test_finish("test_ckpt_full_disk");
}
