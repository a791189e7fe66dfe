/* zoe._zoe: the CPython extension under the zoe package, a thin layer over zoe's public C API
 * (the headers of include/zoe) and nothing else. The Python modules around it (trainer.py, torch.py
 * ...) check what Python callers pass and give it its shape; this layer checks again what can break
 * memory (buffer sizes, dtypes, contiguity), so no call from Python can crash the process.
 *
 * Handles are capsules whose destructors free locally (zoe_*_destroy never communicates), so a
 * Trainer that Python collects on any one rank is freed without the others. Calls that run long
 * or communicate release the GIL. A failing zoe call raises the exception class that
 * zoe/errors.py registers for its status code, with zoe_last_error()'s message. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zoe/adam.h"
#include "zoe/checkpoint.h"
#include "zoe/data.h"
#include "zoe/plan.h"
#include "zoe/tokenizer.h"
#include "zoe/train.h"

/* ---- errors: one Python class per zoe_status, registered by zoe/errors.py ---- */

typedef struct module_state {
    PyObject *error_classes; /* tuple indexed by zoe_status; [0] is zoe.Error */
} module_state;

static module_state *state_of(PyObject *module) {
    return (module_state *)PyModule_GetState(module);
}

/* Raises the registered class for status with message; returns NULL for `return raise(...)`. */
static PyObject *raise_status(PyObject *module, int status, const char *message) {
    PyObject *classes = state_of(module)->error_classes;
    if (!classes) {
        PyErr_Format(PyExc_RuntimeError, "zoe: %s (status %d)", message, status);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(classes);
    PyObject *cls = PyTuple_GET_ITEM(classes, status > 0 && status < n ? status : 0);
    PyObject *error = PyObject_CallFunction(cls, "si", message, status);
    if (error) {
        PyErr_SetObject(cls, error);
        Py_DECREF(error);
    }
    return NULL;
}

static PyObject *raise_last(PyObject *module, zoe_status status) {
    return raise_status(module, (int)status, zoe_last_error());
}

static PyObject *register_errors(PyObject *module, PyObject *classes) {
    if (!PyTuple_Check(classes) || PyTuple_GET_SIZE(classes) < 1) {
        PyErr_SetString(PyExc_TypeError, "_register_errors: a tuple of classes");
        return NULL;
    }
    Py_INCREF(classes);
    Py_XSETREF(state_of(module)->error_classes, classes);
    Py_RETURN_NONE;
}

/* ---- buffers: C-contiguous arrays of one element format and a known element count ---- */

/* The struct module's format codes: "i" with an optional byte-order prefix of native order. */
static int format_is(const char *format, char code) {
    if (!format) return code == 'B';
    if (*format == '@' || *format == '=' || *format == '<') format++;
    return format[0] == code && format[1] == '\0';
}

/* Gets a C-contiguous buffer of exactly count elements (any count when count < 0) of itemsize
 * bytes and format code, named `what` in the message otherwise; writable when asked. Returns 0
 * after raising. */
static int get_array(PyObject *module, PyObject *obj, Py_buffer *view, const char *what, char code,
                     Py_ssize_t itemsize, Py_ssize_t count, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) != 0) {
        PyErr_Clear();
        char msg[256];
        snprintf(msg, sizeof msg,
                 "%s: a C-contiguous%s array (numpy or torch CPU) of %zd elements is needed", what,
                 writable ? " writable" : "", count);
        raise_status(module, ZOE_ERR_INVALID_ARGUMENT, msg);
        return 0;
    }
    if (count < 0 && view->itemsize == itemsize) count = view->len / itemsize;
    if (view->itemsize != itemsize || !format_is(view->format, code) ||
        view->len != count * itemsize) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s: %zd elements of format '%c' needed, got %zd of format '%s'",
                 what, count, code, view->itemsize ? view->len / view->itemsize : 0,
                 view->format ? view->format : "B");
        PyBuffer_Release(view);
        raise_status(module, ZOE_ERR_INVALID_ARGUMENT, msg);
        return 0;
    }
    return 1;
}

/* ---- handles ---- */

/* A trainer and what zoe-train keeps beside it for --save and --metrics: rank 0 of comm holds
 * the save directory's lock for the trainer's life and writes the metrics, opened at the first
 * step (after a load, where the run's first step is known). */
typedef struct trainer_handle {
    zoe_trainer *trainer;
    zoe_train_config cfg;
    MPI_Comm comm;
    int rank;                  /* in comm */
    zoe_checkpoint_lock *lock; /* rank 0 with cfg.save */
    zoe_progress *metrics;     /* rank 0 with cfg.metrics, from the first step */
} trainer_handle;

/* Frees what the handle holds but the trainer (destroyed apart, GIL released). */
static void trainer_handle_release(trainer_handle *h) {
    zoe_progress_destroy(h->metrics);
    h->metrics = NULL;
    zoe_checkpoint_lock_release(h->lock);
    h->lock = NULL;
}

static void trainer_capsule_free(PyObject *capsule) {
    trainer_handle *h = PyCapsule_GetPointer(capsule, "zoe.trainer");
    if (!h) return;
    zoe_trainer_destroy(h->trainer);
    trainer_handle_release(h);
    free(h);
}

static void tokenizer_capsule_free(PyObject *capsule) {
    zoe_tokenizer_destroy(PyCapsule_GetPointer(capsule, "zoe.tokenizer"));
}

static void dataset_capsule_free(PyObject *capsule) {
    zoe_dataset_destroy(PyCapsule_GetPointer(capsule, "zoe.dataset"));
}

static void loader_capsule_free(PyObject *capsule) {
    zoe_loader_destroy(PyCapsule_GetPointer(capsule, "zoe.loader"));
}

/* The trainer of a live capsule, or NULL after raising (a destroyed one is an error, not a
 * crash). */
static trainer_handle *trainer_of(PyObject *module, PyObject *capsule) {
    trainer_handle *h = PyCapsule_GetPointer(capsule, "zoe.trainer");
    if (!h) return NULL;
    if (!h->trainer) {
        raise_status(module, ZOE_ERR_INVALID_ARGUMENT, "the trainer was destroyed");
        return NULL;
    }
    return h;
}

/* argv for zoe_train_config_parse_args from a list of "--name=value" strings. */
static zoe_status parse_config(PyObject *module, PyObject *args_list, zoe_train_config *cfg,
                               int *raised) {
    *raised = 0;
    Py_ssize_t argc = PyList_Size(args_list);
    if (argc < 0) return (*raised = 1), ZOE_ERR_INVALID_ARGUMENT;
    char **argv = calloc((size_t)argc + 2, sizeof *argv);
    if (!argv) return (*raised = 1), PyErr_NoMemory(), ZOE_ERR_OUT_OF_MEMORY;
    argv[0] = "zoe.Trainer";
    for (Py_ssize_t i = 0; i < argc; i++) {
        argv[i + 1] = (char *)PyUnicode_AsUTF8(PyList_GET_ITEM(args_list, i));
        if (!argv[i + 1]) {
            free(argv);
            *raised = 1;
            return ZOE_ERR_INVALID_ARGUMENT;
        }
    }
    zoe_status st = zoe_train_config_defaults(cfg);
    int help = 0, models = 0;
    if (st == ZOE_OK) st = zoe_train_config_parse_args(cfg, (int)argc + 1, argv, &help, &models);
    free(argv);
    (void)module;
    return st;
}

/* ---- MPI ---- */

static void finalize_mpi_at_exit(void) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

/* MPI_COMM_WORLD's handle, initialising MPI first when nothing has (no mpi4py): then MPI is
 * finalized when the interpreter exits. */
static PyObject *py_comm_world(PyObject *module, PyObject *unused) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return raise_status(module, ZOE_ERR_MPI, "MPI_Init_thread failed");
        Py_AtExit(finalize_mpi_at_exit);
    }
    return PyLong_FromVoidPtr((void *)(intptr_t)MPI_COMM_WORLD);
}

/* An MPI_Comm from its handle as mpi4py's MPI._handleof gives it (Open MPI: the pointer;
 * MPICH: the integer). */
static int comm_of(PyObject *handle, MPI_Comm *out) {
    void *p = PyLong_AsVoidPtr(handle);
    if (!p && PyErr_Occurred()) return 0;
    *out = (MPI_Comm)(intptr_t)p;
    return 1;
}

/* ---- the trainer ---- */

/* The status of a check or a write that rank 0 of comm alone makes (as zoe-train: rank 0 writes
 * the metrics and holds the save directory's lock; checkpoint directories are shared), on every
 * rank, with rank 0's message in why when it failed. Collective over comm. */
static zoe_status rank0_status(MPI_Comm comm, int rank, zoe_status st, char *why, size_t cap) {
    int code = (int)st;
    MPI_Bcast(&code, 1, MPI_INT, 0, comm);
    if (code == ZOE_OK) return ZOE_OK;
    if (rank == 0) snprintf(why, cap, "%s", zoe_last_error());
    MPI_Bcast(why, (int)cap, MPI_CHAR, 0, comm);
    return (zoe_status)code;
}

/* zoe-train's refusals before it builds anything, on rank 0 for every rank: an unwritable
 * --metrics or one whose disk cannot hold --steps lines; a --save directory that cannot be
 * written, is in use by another run (its lock, then held by h), or holds another run's
 * checkpoints (unless --resume names it). Collective over h->comm. */
static zoe_status check_outputs(trainer_handle *h, char *why, size_t cap) {
    const zoe_train_config *c = &h->cfg;
    zoe_status st = ZOE_OK;
    if (h->rank == 0) {
        st = zoe_metrics_check(c->metrics);
        if (st == ZOE_OK && c->metrics[0]) st = zoe_metrics_check_room(c->metrics, c->steps);
        if (st == ZOE_OK && c->save[0]) st = zoe_checkpoint_dir_check(c->save);
        if (st == ZOE_OK && c->save[0]) st = zoe_checkpoint_lock_acquire(c->save, &h->lock);
        if (st == ZOE_OK && c->save[0]) st = zoe_checkpoint_dir_check_run(c->save, c->resume);
    }
    return rank0_status(h->comm, h->rank, st, why, cap);
}

/* Rank 0: whether the file system of --save has room for one checkpoint of this trainer. */
static zoe_status room_for_checkpoint(trainer_handle *h) {
    if (h->rank != 0 || !h->cfg.save[0]) return ZOE_OK;
    uint64_t need = 0;
    zoe_status st = zoe_trainer_checkpoint_bytes(h->trainer, &need);
    return st == ZOE_OK ? zoe_checkpoint_room_check(h->cfg.save, need) : st;
}

static PyObject *py_trainer_create(PyObject *module, PyObject *args) {
    PyObject *handle, *flags;
    if (!PyArg_ParseTuple(args, "OO!", &handle, &PyList_Type, &flags)) return NULL;
    MPI_Comm comm;
    if (!comm_of(handle, &comm)) return NULL;
    trainer_handle *h = calloc(1, sizeof *h);
    if (!h) return PyErr_NoMemory();
    h->comm = comm;
    MPI_Comm_rank(comm, &h->rank);
    int raised = 0;
    char why[1024] = "";
    zoe_status st = parse_config(module, flags, &h->cfg, &raised);
    if (st == ZOE_OK) {
        Py_BEGIN_ALLOW_THREADS st = check_outputs(h, why, sizeof why);
        if (st == ZOE_OK) st = zoe_trainer_create(comm, &h->cfg, &h->trainer);
        /* as zoe-train: --resume loads now, and a --save without room is refused before the
         * first step, not after the training it was to keep */
        if (st == ZOE_OK && h->cfg.resume[0])
            st = zoe_trainer_load(h->trainer, h->cfg.resume, NULL, 0);
        if (st == ZOE_OK) st = rank0_status(comm, h->rank, room_for_checkpoint(h), why, sizeof why);
        Py_END_ALLOW_THREADS
    }
    if (st != ZOE_OK) {
        zoe_trainer_destroy(h->trainer);
        trainer_handle_release(h);
        free(h);
        if (raised) return NULL;
        return why[0] ? raise_status(module, (int)st, why) : raise_last(module, st);
    }
    PyObject *capsule = PyCapsule_New(h, "zoe.trainer", trainer_capsule_free);
    if (!capsule) {
        zoe_trainer_destroy(h->trainer);
        trainer_handle_release(h);
        free(h);
    }
    return capsule;
}

/* The configuration the flags give, as zoe_train_config_json writes it (no MPI, no trainer). */
static PyObject *py_config_json(PyObject *module, PyObject *args) {
    PyObject *flags;
    int world = 1;
    if (!PyArg_ParseTuple(args, "O!i", &PyList_Type, &flags, &world)) return NULL;
    zoe_train_config cfg;
    int raised = 0;
    zoe_status st = parse_config(module, flags, &cfg, &raised);
    if (st == ZOE_OK) st = zoe_train_config_validate(&cfg, world);
    if (st != ZOE_OK) return raised ? NULL : raise_last(module, st);
    char *json = zoe_train_config_json(&cfg);
    if (!json) return PyErr_NoMemory();
    PyObject *text = PyUnicode_FromString(json);
    free(json);
    return text;
}

static PyObject *py_trainer_config_json(PyObject *module, PyObject *capsule) {
    trainer_handle *h = trainer_of(module, capsule);
    if (!h) return NULL;
    char *json = zoe_train_config_json(&h->cfg);
    if (!json) return PyErr_NoMemory();
    PyObject *text = PyUnicode_FromString(json);
    free(json);
    return text;
}

static PyObject *py_trainer_destroy(PyObject *module, PyObject *capsule) {
    trainer_handle *h = PyCapsule_GetPointer(capsule, "zoe.trainer");
    if (!h) return NULL;
    zoe_trainer *tr = h->trainer;
    h->trainer = NULL;
    Py_BEGIN_ALLOW_THREADS zoe_trainer_destroy(tr); /* waits for an update in flight */
    Py_END_ALLOW_THREADS trainer_handle_release(h);
    Py_RETURN_NONE;
}

/* Calls that take the trainer alone and return a status, collective or long: GIL released. */
#define TRAINER_CALL(py_name, call)                                                                \
    static PyObject *py_name(PyObject *module, PyObject *capsule) {                                \
        trainer_handle *h = trainer_of(module, capsule);                                           \
        if (!h) return NULL;                                                                       \
        zoe_status st;                                                                             \
        Py_BEGIN_ALLOW_THREADS st = call(h->trainer);                                              \
        Py_END_ALLOW_THREADS if (st != ZOE_OK) return raise_last(module, st);                      \
        Py_RETURN_NONE;                                                                            \
    }
/* zoe-train's end of a run: the last update landed, then with --save the final checkpoint
 * (a step already saved is not written again). Collective. */
static zoe_status finalize_run(trainer_handle *h) {
    zoe_status st = zoe_trainer_finalize(h->trainer);
    if (st == ZOE_OK && h->cfg.save[0])
        st = zoe_trainer_save(h->trainer, h->cfg.save, h->cfg.keep_last, NULL, 0);
    return st;
}

static PyObject *py_trainer_finalize(PyObject *module, PyObject *capsule) {
    trainer_handle *h = trainer_of(module, capsule);
    if (!h) return NULL;
    zoe_status st;
    Py_BEGIN_ALLOW_THREADS st = finalize_run(h);
    Py_END_ALLOW_THREADS if (st != ZOE_OK) return raise_last(module, st);
    Py_RETURN_NONE;
}
TRAINER_CALL(py_trainer_flush, zoe_trainer_flush)
TRAINER_CALL(py_trainer_eval_begin, zoe_trainer_eval_begin)

static PyObject *py_trainer_info(PyObject *module, PyObject *capsule) {
    trainer_handle *h = trainer_of(module, capsule);
    if (!h) return NULL;
    const zoe_trainer *tr = h->trainer;
    return Py_BuildValue("{s:L,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "param_count",
                         (long long)zoe_trainer_param_count(tr), "rank", zoe_trainer_rank(tr),
                         "dp_rank", zoe_trainer_dp_rank(tr), "dp_size", zoe_trainer_dp_size(tr),
                         "steps_done", zoe_trainer_steps_done(tr), "micro_batch",
                         h->cfg.micro_batch, "seq_len", h->cfg.model.seq_len, "vocab",
                         h->cfg.model.vocab, "grad_accum", h->cfg.grad_accum);
}

static PyObject *py_trainer_lr_at(PyObject *module, PyObject *args) {
    PyObject *capsule;
    int step;
    if (!PyArg_ParseTuple(args, "Oi", &capsule, &step)) return NULL;
    trainer_handle *h = trainer_of(module, capsule);
    if (!h) return NULL;
    return PyFloat_FromDouble((double)zoe_train_lr_at(&h->cfg, step));
}

static PyObject *py_trainer_begin_step(PyObject *module, PyObject *args) {
    PyObject *capsule;
    long long counted;
    if (!PyArg_ParseTuple(args, "OL", &capsule, &counted)) return NULL;
    trainer_handle *h = trainer_of(module, capsule);
    if (!h) return NULL;
    zoe_status st;
    Py_BEGIN_ALLOW_THREADS st = zoe_trainer_begin_step(h->trainer, (int64_t)counted);
    Py_END_ALLOW_THREADS if (st != ZOE_OK) return raise_last(module, st);
    Py_RETURN_NONE;
}

/* The tokens and targets of one micro-batch: int32 [micro_batch, seq_len] each. */
static int get_batch(PyObject *module, const trainer_handle *h, PyObject *tokens, PyObject *targets,
                     Py_buffer *tv, Py_buffer *gv) {
    Py_ssize_t n = (Py_ssize_t)h->cfg.micro_batch * h->cfg.model.seq_len;
    if (!get_array(module, tokens, tv, "tokens", 'i', 4, n, 0)) return 0;
    if (targets && !get_array(module, targets, gv, "targets", 'i', 4, n, 0)) {
        PyBuffer_Release(tv);
        return 0;
    }
    return 1;
}

/* mode 0: training micro-batch (returns its loss), 1: evaluation micro-batch. */
static PyObject *batch_call(PyObject *module, PyObject *args, int eval) {
    PyObject *capsule, *tokens, *targets;
    if (!PyArg_ParseTuple(args, "OOO", &capsule, &tokens, &targets)) return NULL;
    trainer_handle *h = trainer_of(module, capsule);
    if (!h) return NULL;
    Py_buffer tv, gv;
    if (!get_batch(module, h, tokens, targets, &tv, &gv)) return NULL;
    float loss = 0;
    zoe_status st;
    Py_BEGIN_ALLOW_THREADS st = eval ? zoe_trainer_eval_micro_batch(h->trainer, tv.buf, gv.buf)
                                     : zoe_trainer_micro_batch(h->trainer, tv.buf, gv.buf, &loss);
    Py_END_ALLOW_THREADS PyBuffer_Release(&tv);
    PyBuffer_Release(&gv);
    if (st != ZOE_OK) return raise_last(module, st);
    return PyFloat_FromDouble((double)loss);
}

static PyObject *py_trainer_micro_batch(PyObject *module, PyObject *args) {
    return batch_call(module, args, 0);
}

static PyObject *py_trainer_eval_micro_batch(PyObject *module, PyObject *args) {
    return batch_call(module, args, 1);
}

static PyObject *py_trainer_eval_end(PyObject *module, PyObject *capsule) {
    trainer_handle *h = trainer_of(module, capsule);
    if (!h) return NULL;
    float loss = 0;
    zoe_status st;
    Py_BEGIN_ALLOW_THREADS st = zoe_trainer_eval_end(h->trainer, &loss);
    Py_END_ALLOW_THREADS if (st != ZOE_OK) return raise_last(module, st);
    return PyFloat_FromDouble((double)loss);
}

/* One step as zoe-train takes it: the step, its metrics line (rank 0; a line it cannot write
 * stops every rank, why holding its message), and with --save and --save-every N a checkpoint
 * after every N-th step. Collective. */
static zoe_status step_run(trainer_handle *h, float lr, zoe_step_stats *s, char *why, size_t cap) {
    const zoe_train_config *c = &h->cfg;
    zoe_status st = ZOE_OK;
    if (c->metrics[0]) {
        if (h->rank == 0 && !h->metrics) /* a resumed run keeps the lines of its earlier steps */
            st =
                zoe_progress_create_at(NULL, ZOE_PROGRESS_LINES, c->steps, c->log_every, c->metrics,
                                       zoe_trainer_steps_done(h->trainer), &h->metrics);
        st = rank0_status(h->comm, h->rank, st, why, cap);
    }
    if (st == ZOE_OK) st = zoe_trainer_step(h->trainer, lr, s);
    if (st == ZOE_OK && c->metrics[0])
        st = rank0_status(h->comm, h->rank,
                          h->metrics ? zoe_progress_report(h->metrics, s) : ZOE_OK, why, cap);
    if (st == ZOE_OK && c->save[0] && c->save_every > 0 && (s->step + 1) % c->save_every == 0)
        st = zoe_trainer_save(h->trainer, c->save, c->keep_last, NULL, 0);
    return st;
}

static PyObject *py_trainer_step(PyObject *module, PyObject *args) {
    PyObject *capsule;
    float lr;
    if (!PyArg_ParseTuple(args, "Of", &capsule, &lr)) return NULL;
    trainer_handle *h = trainer_of(module, capsule);
    if (!h) return NULL;
    zoe_step_stats s;
    char why[1024] = "";
    zoe_status st;
    Py_BEGIN_ALLOW_THREADS st = step_run(h, lr, &s, why, sizeof why);
    Py_END_ALLOW_THREADS if (st != ZOE_OK) return why[0] ? raise_status(module, (int)st, why)
                                                         : raise_last(module, st);
    return Py_BuildValue(
        "{s:i,s:f,s:f,s:f,s:f,s:O,s:O,s:L,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:O,s:L,s:d}", "step", s.step,
        "loss", (double)s.loss, "lr", (double)s.lr, "grad_norm", (double)s.grad_norm, "loss_scale",
        (double)s.loss_scale, "skipped", s.skipped ? Py_True : Py_False, "overlapped",
        s.overlapped ? Py_True : Py_False, "tokens", (long long)s.tokens, "ms_total", s.ms_total,
        "ms_forward", s.ms_forward, "ms_backward", s.ms_backward, "ms_offload", s.ms_offload,
        "ms_host_step", s.ms_host_step, "ms_refresh", s.ms_refresh, "ms_optimizer", s.ms_optimizer,
        "redone", s.redone ? Py_True : Py_False, "device_peak_bytes",
        (long long)s.device_peak_bytes, "ms_grad_wait", s.ms_grad_wait);
}

static PyObject *py_trainer_logits(PyObject *module, PyObject *args) {
    PyObject *capsule, *tokens, *out;
    if (!PyArg_ParseTuple(args, "OOO", &capsule, &tokens, &out)) return NULL;
    trainer_handle *h = trainer_of(module, capsule);
    if (!h) return NULL;
    Py_buffer tv, ov;
    Py_ssize_t n = (Py_ssize_t)h->cfg.micro_batch * h->cfg.model.seq_len;
    if (!get_array(module, tokens, &tv, "tokens", 'i', 4, n, 0)) return NULL;
    if (!get_array(module, out, &ov, "logits", 'f', 4, n * h->cfg.model.vocab, 1)) {
        PyBuffer_Release(&tv);
        return NULL;
    }
    zoe_status st;
    Py_BEGIN_ALLOW_THREADS st = zoe_trainer_logits(h->trainer, tv.buf, ov.buf);
    Py_END_ALLOW_THREADS PyBuffer_Release(&tv);
    PyBuffer_Release(&ov);
    if (st != ZOE_OK) return raise_last(module, st);
    Py_RETURN_NONE;
}

static PyObject *py_trainer_save(PyObject *module, PyObject *args) {
    PyObject *capsule;
    const char *dir;
    int keep_last = 0;
    if (!PyArg_ParseTuple(args, "Osi", &capsule, &dir, &keep_last)) return NULL;
    trainer_handle *h = trainer_of(module, capsule);
    if (!h) return NULL;
    char saved[2 * ZOE_PATH_MAX] = "";
    zoe_status st;
    Py_BEGIN_ALLOW_THREADS st = zoe_trainer_save(h->trainer, dir, keep_last, saved, sizeof saved);
    Py_END_ALLOW_THREADS if (st != ZOE_OK) return raise_last(module, st);
    return PyUnicode_FromString(saved);
}

static PyObject *py_trainer_load(PyObject *module, PyObject *args) {
    PyObject *capsule;
    const char *path;
    if (!PyArg_ParseTuple(args, "Os", &capsule, &path)) return NULL;
    trainer_handle *h = trainer_of(module, capsule);
    if (!h) return NULL;
    char loaded[2 * ZOE_PATH_MAX] = "";
    zoe_status st;
    Py_BEGIN_ALLOW_THREADS st = zoe_trainer_load(h->trainer, path, loaded, sizeof loaded);
    Py_END_ALLOW_THREADS if (st != ZOE_OK) return raise_last(module, st);
    return PyUnicode_FromString(loaded);
}

/* ---- the plan ---- */

static PyObject *py_plan_json(PyObject *module, PyObject *args) {
    PyObject *flags;
    int world = 1;
    if (!PyArg_ParseTuple(args, "O!i", &PyList_Type, &flags, &world)) return NULL;
    zoe_train_config cfg;
    int raised = 0;
    zoe_status st = parse_config(module, flags, &cfg, &raised);
    if (st != ZOE_OK) return raised ? NULL : raise_last(module, st);
    zoe_hardware hw;
    zoe_plan_config pc;
    zoe_plan_result r;
    char *text = NULL;
    size_t len = 0;
    Py_BEGIN_ALLOW_THREADS st = zoe_train_config_validate(&cfg, world);
    if (st == ZOE_OK)
        st = strcmp(cfg.hardware, "local") == 0 ? zoe_hardware_local(0, &hw)
                                                : zoe_hardware_preset(cfg.hardware, &hw);
    if (st == ZOE_OK) st = zoe_plan_config_from_train(&cfg, world, &hw, &pc);
    if (st == ZOE_OK) st = zoe_plan(&pc, &r);
    if (st == ZOE_OK) {
        FILE *out = open_memstream(&text, &len);
        st = out ? zoe_plan_write_json(out, &pc, &r) : ZOE_ERR_OUT_OF_MEMORY;
        if (out) fclose(out);
    }
    Py_END_ALLOW_THREADS if (st != ZOE_OK) {
        free(text);
        return raise_last(module, st);
    }
    PyObject *json = PyUnicode_FromStringAndSize(text, (Py_ssize_t)len);
    free(text);
    return json;
}

/* ---- tokenizer ---- */

static PyObject *py_tokenizer_load(PyObject *module, PyObject *args) {
    const char *path, *eod = NULL;
    if (!PyArg_ParseTuple(args, "z|z", &path, &eod)) return NULL;
    zoe_tokenizer *tok = NULL;
    zoe_status st =
        path ? zoe_tokenizer_load_json(path, eod, &tok) : zoe_tokenizer_create_bytes(&tok);
    if (st != ZOE_OK) return raise_last(module, st);
    PyObject *capsule = PyCapsule_New(tok, "zoe.tokenizer", tokenizer_capsule_free);
    if (!capsule) zoe_tokenizer_destroy(tok);
    return capsule;
}

static PyObject *py_tokenizer_info(PyObject *module, PyObject *capsule) {
    const zoe_tokenizer *tok = PyCapsule_GetPointer(capsule, "zoe.tokenizer");
    if (!tok) return NULL;
    return Py_BuildValue("{s:i,s:i}", "vocab_size", (int)zoe_tokenizer_vocab_size(tok), "eod",
                         (int)zoe_tokenizer_eod(tok));
}

/* Encodes each bytes object of a list into a bytearray of int32 tokens (numpy views them). */
static PyObject *py_tokenizer_encode_batch(PyObject *module, PyObject *args) {
    PyObject *capsule, *texts;
    if (!PyArg_ParseTuple(args, "OO!", &capsule, &PyList_Type, &texts)) return NULL;
    const zoe_tokenizer *tok = PyCapsule_GetPointer(capsule, "zoe.tokenizer");
    if (!tok) return NULL;
    zoe_encoder *enc = NULL;
    zoe_status st = zoe_encoder_create(tok, &enc);
    if (st != ZOE_OK) return raise_last(module, st);
    Py_ssize_t count = PyList_GET_SIZE(texts);
    PyObject *result = PyList_New(count);
    for (Py_ssize_t i = 0; result && i < count; i++) {
        char *text;
        Py_ssize_t len;
        if (PyBytes_AsStringAndSize(PyList_GET_ITEM(texts, i), &text, &len) != 0) {
            Py_CLEAR(result);
            break;
        }
        size_t cap = zoe_tokenizer_max_tokens(tok, (size_t)len), n = 0;
        PyObject *tokens = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(cap * 4));
        if (!tokens) {
            Py_CLEAR(result);
            break;
        }
        Py_BEGIN_ALLOW_THREADS st = zoe_encoder_encode(
            enc, text, (size_t)len, (int32_t *)PyByteArray_AS_STRING(tokens), cap, &n);
        Py_END_ALLOW_THREADS if (st != ZOE_OK || PyByteArray_Resize(tokens, (Py_ssize_t)(n * 4))) {
            Py_DECREF(tokens);
            Py_CLEAR(result);
            if (st != ZOE_OK) raise_last(module, st);
            break;
        }
        PyList_SET_ITEM(result, i, tokens);
    }
    zoe_encoder_destroy(enc);
    return result;
}

static PyObject *py_tokenizer_decode(PyObject *module, PyObject *args) {
    PyObject *capsule, *tokens;
    if (!PyArg_ParseTuple(args, "OO", &capsule, &tokens)) return NULL;
    const zoe_tokenizer *tok = PyCapsule_GetPointer(capsule, "zoe.tokenizer");
    if (!tok) return NULL;
    Py_buffer tv;
    if (!get_array(module, tokens, &tv, "tokens", 'i', 4, -1, 0)) return NULL;
    Py_ssize_t n = tv.len / 4;
    /* the longest token of a tokenizer.json is a few hundred bytes; grow until it fits */
    for (size_t cap = (size_t)n * 16 + 64;; cap *= 4) {
        char *text = malloc(cap);
        if (!text) return PyBuffer_Release(&tv), PyErr_NoMemory();
        size_t len = 0;
        zoe_status st = zoe_tokenizer_decode(tok, tv.buf, (size_t)n, text, cap, &len);
        if (st == ZOE_OK) {
            PyObject *bytes = PyBytes_FromStringAndSize(text, (Py_ssize_t)len);
            free(text);
            PyBuffer_Release(&tv);
            return bytes;
        }
        free(text);
        if (cap > (size_t)n * 65536 + 65536) {
            PyBuffer_Release(&tv);
            return raise_last(module, st);
        }
    }
}

/* ---- datasets and the loader ---- */

static PyObject *py_dataset_open(PyObject *module, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    zoe_dataset *ds = NULL;
    zoe_status st;
    Py_BEGIN_ALLOW_THREADS st = zoe_dataset_open(path, &ds);
    Py_END_ALLOW_THREADS if (st != ZOE_OK) return raise_last(module, st);
    PyObject *capsule = PyCapsule_New(ds, "zoe.dataset", dataset_capsule_free);
    if (!capsule) zoe_dataset_destroy(ds);
    return capsule;
}

static PyObject *py_dataset_info(PyObject *module, PyObject *capsule) {
    const zoe_dataset *ds = PyCapsule_GetPointer(capsule, "zoe.dataset");
    if (!ds) return NULL;
    return Py_BuildValue("{s:s,s:s,s:L,s:L,s:L}", "name", zoe_dataset_name(ds), "dtype",
                         zoe_token_dtype_name(zoe_dataset_dtype(ds)), "tokens",
                         (long long)zoe_dataset_tokens(ds), "documents",
                         (long long)zoe_dataset_documents(ds), "sequences",
                         (long long)zoe_dataset_sequences(ds));
}

static PyObject *py_dataset_read(PyObject *module, PyObject *args) {
    PyObject *capsule, *out;
    long long offset, count;
    if (!PyArg_ParseTuple(args, "OLLO", &capsule, &offset, &count, &out)) return NULL;
    const zoe_dataset *ds = PyCapsule_GetPointer(capsule, "zoe.dataset");
    if (!ds) return NULL;
    Py_buffer ov;
    if (!get_array(module, out, &ov, "out", 'i', 4, (Py_ssize_t)count, 1)) return NULL;
    zoe_status st = zoe_dataset_read(ds, offset, count, ov.buf);
    PyBuffer_Release(&ov);
    if (st != ZOE_OK) return raise_last(module, st);
    Py_RETURN_NONE;
}

static PyObject *py_dataset_document(PyObject *module, PyObject *args) {
    PyObject *capsule;
    long long doc;
    if (!PyArg_ParseTuple(args, "OL", &capsule, &doc)) return NULL;
    const zoe_dataset *ds = PyCapsule_GetPointer(capsule, "zoe.dataset");
    if (!ds) return NULL;
    int64_t offset = 0, length = 0;
    zoe_status st = zoe_dataset_document(ds, doc, &offset, &length);
    if (st != ZOE_OK) return raise_last(module, st);
    return Py_BuildValue("(LL)", (long long)offset, (long long)length);
}

static PyObject *py_loader_create(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"dataset",    "seq_len", "micro_batch", "dp_size", "dp_rank",
                            "grad_accum", "seed",    "vocab_size",  NULL};
    PyObject *capsule;
    zoe_loader_config lc = {0};
    long long seq_len;
    unsigned long long seed;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLiiiiKi", names, &capsule, &seq_len,
                                     &lc.micro_batch, &lc.dp_size, &lc.dp_rank, &lc.grad_accum,
                                     &seed, &lc.vocab_size))
        return NULL;
    const zoe_dataset *ds = PyCapsule_GetPointer(capsule, "zoe.dataset");
    if (!ds) return NULL;
    lc.seq_len = seq_len, lc.seed = seed;
    zoe_loader *loader = NULL;
    zoe_status st = zoe_loader_create(ds, &lc, &loader);
    if (st != ZOE_OK) return raise_last(module, st);
    PyObject *lcap = PyCapsule_New(loader, "zoe.loader", loader_capsule_free);
    if (!lcap) zoe_loader_destroy(loader);
    return lcap;
}

static PyObject *py_loader_info(PyObject *module, PyObject *capsule) {
    const zoe_loader *loader = PyCapsule_GetPointer(capsule, "zoe.loader");
    if (!loader) return NULL;
    return Py_BuildValue("{s:L,s:L}", "sequences", (long long)zoe_loader_sequences(loader),
                         "steps_per_epoch", (long long)zoe_loader_steps_per_epoch(loader));
}

static PyObject *py_loader_fetch(PyObject *module, PyObject *args) {
    PyObject *capsule, *tokens, *targets;
    long long step;
    int micro;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OLinOO", &capsule, &step, &micro, &n, &tokens, &targets))
        return NULL;
    const zoe_loader *loader = PyCapsule_GetPointer(capsule, "zoe.loader");
    if (!loader) return NULL;
    Py_buffer tv, gv;
    if (!get_array(module, tokens, &tv, "tokens", 'i', 4, n, 1)) return NULL;
    if (!get_array(module, targets, &gv, "targets", 'i', 4, n, 1)) {
        PyBuffer_Release(&tv);
        return NULL;
    }
    zoe_status st;
    Py_BEGIN_ALLOW_THREADS st = zoe_loader_fetch(loader, step, micro, tv.buf, gv.buf);
    Py_END_ALLOW_THREADS PyBuffer_Release(&tv);
    PyBuffer_Release(&gv);
    if (st != ZOE_OK) return raise_last(module, st);
    Py_RETURN_NONE;
}

static PyObject *py_count_targets(PyObject *module, PyObject *targets) {
    Py_buffer gv;
    if (!get_array(module, targets, &gv, "targets", 'i', 4, -1, 0)) return NULL;
    int64_t counted = zoe_count_targets(gv.buf, (size_t)(gv.len / 4));
    PyBuffer_Release(&gv);
    return PyLong_FromLongLong((long long)counted);
}

/* ---- the host Adam over caller's arrays (zoe/adam.h) ----
 * Arrays come as addresses: torch has no buffer protocol and numpy no bf16, so zoe.torch checks
 * each tensor (CPU, contiguous, dtype, element count) before passing its data_ptr(). */
/* zoe_adam_step_state over a tensor's arrays given by address (HostAdam checks the tensors);
 * the scales are 0 unless the moment's dtype is int8. */
static PyObject *py_adam_step(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"master",
                            "exp_avg",
                            "exp_avg_sq",
                            "grad",
                            "grad_dtype",
                            "param",
                            "param_dtype",
                            "n",
                            "lr",
                            "beta1",
                            "beta2",
                            "eps",
                            "weight_decay",
                            "decoupled",
                            "grad_scale",
                            "step",
                            "threads",
                            "master_dtype",
                            "exp_avg_dtype",
                            "exp_avg_sq_dtype",
                            "exp_avg_scale",
                            "exp_avg_sq_scale",
                            "seed",
                            NULL};
    unsigned long long master, m, v, grad, param, m_scale = 0, v_scale = 0, seed = 0;
    int grad_dtype, param_dtype, decoupled, threads, master_dtype = ZOE_F32, m_dtype = ZOE_F32,
                                                     v_dtype = ZOE_F32;
    Py_ssize_t n;
    long step;
    float lr, beta1, beta2, eps, wd, grad_scale;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KKKKiKinfffffpfli|iiiKKK", names, &master, &m,
                                     &v, &grad, &grad_dtype, &param, &param_dtype, &n, &lr, &beta1,
                                     &beta2, &eps, &wd, &decoupled, &grad_scale, &step, &threads,
                                     &master_dtype, &m_dtype, &v_dtype, &m_scale, &v_scale, &seed))
        return NULL;
    if (n < 0) return raise_status(module, ZOE_ERR_INVALID_ARGUMENT, "adam_step: n < 0");
    zoe_adam_config cfg = ZOE_ADAM_CONFIG_INITIALIZER;
    cfg.lr = lr, cfg.beta1 = beta1, cfg.beta2 = beta2, cfg.eps = eps, cfg.weight_decay = wd;
    cfg.decoupled = decoupled, cfg.grad_scale = grad_scale, cfg.step = step;
    cfg.threads = threads, cfg.seed = seed;
    cfg.master_dtype = (zoe_dtype)master_dtype, cfg.exp_avg_dtype = (zoe_dtype)m_dtype;
    cfg.exp_avg_sq_dtype = (zoe_dtype)v_dtype;
    zoe_adam_state_arrays state = {.master = (void *)(uintptr_t)master,
                                   .exp_avg = (void *)(uintptr_t)m,
                                   .exp_avg_sq = (void *)(uintptr_t)v,
                                   .exp_avg_scale = (float *)(uintptr_t)m_scale,
                                   .exp_avg_sq_scale = (float *)(uintptr_t)v_scale};
    zoe_status st;
    Py_BEGIN_ALLOW_THREADS st =
        zoe_adam_step_state(&cfg, &state, (const void *)(uintptr_t)grad, (zoe_dtype)grad_dtype,
                            (void *)(uintptr_t)param, (zoe_dtype)param_dtype, (size_t)n);
    Py_END_ALLOW_THREADS if (st != ZOE_OK) return raise_last(module, st);
    Py_RETURN_NONE;
}

static PyObject *py_status_string(PyObject *module, PyObject *arg) {
    long status = PyLong_AsLong(arg);
    if (status == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(zoe_status_string((zoe_status)status));
}

#define FN(name, flags)                                                                            \
    { #name, (PyCFunction)(void (*)(void))py_##name, flags, NULL }
static PyMethodDef methods[] = {
    {"_register_errors", register_errors, METH_O, NULL},
    FN(status_string, METH_O),
    FN(comm_world, METH_NOARGS),
    FN(config_json, METH_VARARGS),
    FN(trainer_create, METH_VARARGS),
    FN(trainer_config_json, METH_O),
    FN(trainer_destroy, METH_O),
    FN(trainer_finalize, METH_O),
    FN(trainer_flush, METH_O),
    FN(trainer_info, METH_O),
    FN(trainer_lr_at, METH_VARARGS),
    FN(trainer_begin_step, METH_VARARGS),
    FN(trainer_micro_batch, METH_VARARGS),
    FN(trainer_step, METH_VARARGS),
    FN(trainer_eval_begin, METH_O),
    FN(trainer_eval_micro_batch, METH_VARARGS),
    FN(trainer_eval_end, METH_O),
    FN(trainer_logits, METH_VARARGS),
    FN(trainer_save, METH_VARARGS),
    FN(trainer_load, METH_VARARGS),
    FN(plan_json, METH_VARARGS),
    FN(tokenizer_load, METH_VARARGS),
    FN(tokenizer_info, METH_O),
    FN(tokenizer_encode_batch, METH_VARARGS),
    FN(tokenizer_decode, METH_VARARGS),
    FN(dataset_open, METH_VARARGS),
    FN(dataset_info, METH_O),
    FN(dataset_read, METH_VARARGS),
    FN(dataset_document, METH_VARARGS),
    FN(loader_create, METH_VARARGS | METH_KEYWORDS),
    FN(loader_info, METH_O),
    FN(loader_fetch, METH_VARARGS),
    FN(count_targets, METH_O),
    FN(adam_step, METH_VARARGS | METH_KEYWORDS),
    {NULL, NULL, 0, NULL},
};

static int module_traverse(PyObject *module, visitproc visit, void *arg) {
    Py_VISIT(state_of(module)->error_classes);
    return 0;
}

static int module_clear(PyObject *module) {
    Py_CLEAR(state_of(module)->error_classes);
    return 0;
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_zoe",       "zoe's C API (see the zoe package)",
    sizeof(module_state),  methods,      NULL,
    module_traverse,       module_clear, NULL,
};

PyMODINIT_FUNC PyInit__zoe(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (!module) return NULL;
    state_of(module)->error_classes = NULL;
    if (PyModule_AddIntConstant(module, "F32", ZOE_F32) ||
        PyModule_AddIntConstant(module, "BF16", ZOE_BF16) ||
        PyModule_AddIntConstant(module, "F16", ZOE_F16) ||
        PyModule_AddIntConstant(module, "I8", ZOE_I8) ||
        PyModule_AddIntConstant(module, "API_VERSION", ZOE_API_VERSION)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
