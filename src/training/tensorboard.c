/* TensorBoard event files: the writer behind torch.utils.tensorboard.SummaryWriter (tensorboard's
 * EventFileWriter, summary.scalar and summary.text) that Megatron-LM core_v0.12.1 uses for
 * --tensorboard-dir. Events are protobufs encoded by hand (only the few fields TensorBoard reads
 * for scalars and text) inside TFRecord framing with masked CRC-32C checksums.
 *
 * Field numbers (tensorboard/compat/proto): Event{1 wall_time double, 2 step int64,
 * 3 file_version string, 5 summary, 10 source_metadata{1 writer}}; Summary{1 value};
 * Summary.Value{1 tag, 2 simple_value float, 8 tensor, 9 metadata}; SummaryMetadata{1 plugin_data
 * {1 plugin_name}}; TensorProto{1 dtype, 2 tensor_shape{2 dim{1 size}}, 8 string_val}. */
#include "training/tensorboard.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };
enum { DT_STRING = 7 };

/* ---- CRC-32C ------------------------------------------------------------------------------ */

static uint32_t crc_table[256];
static int crc_ready;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[i] = c;
    }
    crc_ready = 1;
}

uint32_t mc_tb_crc32c(const void *data, size_t n)
{
    if (!crc_ready)
        crc_init(); /* idempotent: a racing second init writes the same table */
    const uint8_t *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* TFRecord masks the CRC so that a CRC of data holding CRCs stays well distributed. */
uint32_t mc_tb_masked_crc32c(const void *data, size_t n)
{
    uint32_t c = mc_tb_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

/* ---- protobuf encoding -------------------------------------------------------------------- */

/* A write cursor that counts every byte but stores only those that fit (a NULL buffer of size
 * 0 just measures). */
struct pb {
    uint8_t *buf;
    size_t n, pos;
};

static void put_byte(struct pb *c, uint8_t b)
{
    if (c->pos < c->n)
        c->buf[c->pos] = b;
    c->pos++;
}

static void put_raw(struct pb *c, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++)
        put_byte(c, p[i]);
}

static void put_varint(struct pb *c, uint64_t v)
{
    while (v >= 0x80) {
        put_byte(c, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    put_byte(c, (uint8_t)v);
}

static void put_key(struct pb *c, int field, int wire)
{
    put_varint(c, ((uint64_t)field << 3) | (uint64_t)wire);
}

static void put_le(struct pb *c, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        put_byte(c, (uint8_t)(v >> (8 * i)));
}

static void put_string(struct pb *c, int field, const char *s, size_t len)
{
    put_key(c, field, WIRE_LEN);
    put_varint(c, len);
    put_raw(c, s, len);
}

static void put_double(struct pb *c, int field, double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof(u));
    put_key(c, field, WIRE_FIXED64);
    put_le(c, u, 8);
}

static void put_float(struct pb *c, int field, float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    put_key(c, field, WIRE_FIXED32);
    put_le(c, u, 4);
}

/* A nested message: measured by a dry run of its encoder, then written. */
typedef void (*encode_fn)(struct pb *c, const void *ctx);

static void put_message(struct pb *c, int field, encode_fn fn, const void *ctx)
{
    struct pb dry = {0};
    fn(&dry, ctx);
    put_key(c, field, WIRE_LEN);
    put_varint(c, dry.pos);
    fn(c, ctx);
}

struct value_ctx {
    const char *tag;
    const char *suffix; /* appended to the tag ("/text_summary") or "" */
    bool is_text;
    float simple_value;
    const char *text;
};

static void enc_dim1(struct pb *c, const void *ctx)
{
    (void)ctx;
    put_key(c, 1, WIRE_VARINT); /* TensorShapeProto.Dim.size = 1 */
    put_varint(c, 1);
}

static void enc_shape1(struct pb *c, const void *ctx)
{
    put_message(c, 2, enc_dim1, ctx);
}

static void enc_string_tensor(struct pb *c, const void *ctx)
{
    const struct value_ctx *v = ctx;
    put_key(c, 1, WIRE_VARINT);
    put_varint(c, DT_STRING);
    put_message(c, 2, enc_shape1, ctx);
    put_string(c, 8, v->text, strlen(v->text));
}

static void enc_text_plugin(struct pb *c, const void *ctx)
{
    (void)ctx;
    put_string(c, 1, "text", 4); /* TextPluginData{version 0} serializes to nothing */
}

static void enc_text_metadata(struct pb *c, const void *ctx)
{
    put_message(c, 1, enc_text_plugin, ctx);
}

static void enc_value(struct pb *c, const void *ctx)
{
    const struct value_ctx *v = ctx;
    size_t a = strlen(v->tag), b = strlen(v->suffix);
    put_key(c, 1, WIRE_LEN);
    put_varint(c, a + b);
    put_raw(c, v->tag, a);
    put_raw(c, v->suffix, b);
    if (!v->is_text) {
        put_float(c, 2, v->simple_value); /* inside a oneof: written even when 0 */
        return;
    }
    put_message(c, 8, enc_string_tensor, ctx);
    put_message(c, 9, enc_text_metadata, ctx);
}

static void enc_summary(struct pb *c, const void *ctx)
{
    put_message(c, 1, enc_value, ctx);
}

static void enc_source_metadata(struct pb *c, const void *ctx)
{
    (void)ctx;
    static const char writer[] = "megatron.c";
    put_string(c, 1, writer, sizeof(writer) - 1);
}

static void put_event_head(struct pb *c, double wall_time, int64_t step)
{
    put_double(c, 1, wall_time);
    if (step != 0) { /* proto3 leaves a default step out */
        put_key(c, 2, WIRE_VARINT);
        put_varint(c, (uint64_t)step);
    }
}

size_t mc_tb_encode_file_version(uint8_t *buf, size_t n, double wall_time)
{
    static const char version[] = "brain.Event:2";
    struct pb c = {buf, n, 0};
    put_event_head(&c, wall_time, 0);
    put_string(&c, 3, version, sizeof(version) - 1);
    put_message(&c, 10, enc_source_metadata, NULL);
    return c.pos;
}

size_t mc_tb_encode_scalar(uint8_t *buf, size_t n, double wall_time, int64_t step,
                           const char *tag, float value)
{
    struct value_ctx v = {.tag = tag, .suffix = "", .simple_value = value};
    struct pb c = {buf, n, 0};
    put_event_head(&c, wall_time, step);
    put_message(&c, 5, enc_summary, &v);
    return c.pos;
}

size_t mc_tb_encode_text(uint8_t *buf, size_t n, double wall_time, int64_t step, const char *tag,
                         const char *text)
{
    struct value_ctx v = {.tag = tag, .suffix = "/text_summary", .is_text = true, .text = text};
    struct pb c = {buf, n, 0};
    put_event_head(&c, wall_time, step);
    put_message(&c, 5, enc_summary, &v);
    return c.pos;
}

size_t mc_tb_frame_record(uint8_t *buf, size_t n, const uint8_t *data, size_t len)
{
    size_t need = len + 16;
    if (n < need)
        return need;
    uint8_t head[8];
    for (int i = 0; i < 8; i++)
        head[i] = (uint8_t)((uint64_t)len >> (8 * i));
    struct pb c = {buf, n, 0};
    put_raw(&c, head, 8);
    put_le(&c, mc_tb_masked_crc32c(head, 8), 4);
    put_raw(&c, data, len);
    put_le(&c, mc_tb_masked_crc32c(data, len), 4);
    return need;
}

/* ---- the writer --------------------------------------------------------------------------- */

struct mc_tb_writer {
    FILE *f;
    char *path;
    uint8_t *queue; /* framed records not yet written */
    size_t queued, cap;
    int64_t pending, max_queue;
    double last_flush; /* wall time of the last write-out */
};

/* SummaryWriter's flush_secs default: queued events reach the file at least this often. */
#define FLUSH_SECS 120.0

static double wall_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* mkdir -p, as SummaryWriter's makedirs. */
static mc_status make_dirs(const char *dir)
{
    size_t n = strlen(dir);
    char *p = mc_alloc(n + 1);
    if (!p)
        return MC_ERR_NOMEM;
    memcpy(p, dir, n + 1);
    mc_status st = MC_OK;
    for (size_t i = 1; i <= n && !st; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char keep = p[i];
        p[i] = '\0';
        struct stat sb;
        if (mkdir(p, 0777) && errno != EEXIST)
            st = mc_error(MC_ERR_IO, "--tensorboard-dir %s: cannot create %s: %s", dir, p,
                          strerror(errno));
        else if (stat(p, &sb) || !S_ISDIR(sb.st_mode))
            st = mc_error(MC_ERR_IO, "--tensorboard-dir %s: %s exists and is not a directory",
                          dir, p);
        p[i] = keep;
    }
    mc_free(p);
    return st;
}

/* events.out.tfevents.<%010d seconds>.<hostname>.<pid>.<n>, n counting writers in this
 * process as tensorboard's global uid does; "x" mode never reuses an existing file. */
static mc_status create_event_file(struct mc_tb_writer *w, const char *dir)
{
    static int uid;
    char host[256] = "localhost";
    if (gethostname(host, sizeof(host)))
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    size_t n = strlen(dir) + strlen(host) + 96;
    if (!(w->path = mc_alloc(n)))
        return MC_ERR_NOMEM;
    for (int tries = 0; tries < 1000; tries++) {
        snprintf(w->path, n, "%s/events.out.tfevents.%010lld.%s.%ld.%d", dir,
                 (long long)time(NULL), host, (long)getpid(), uid++);
        if ((w->f = fopen(w->path, "wbx")))
            return MC_OK;
        if (errno != EEXIST)
            break;
    }
    return mc_error(MC_ERR_IO, "--tensorboard-dir: cannot create the event file %s: %s", w->path,
                    strerror(errno));
}

static mc_status enqueue(mc_tb_writer *w, const uint8_t *event, size_t len)
{
    size_t need = w->queued + len + 16;
    if (need > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < need)
            cap *= 2;
        uint8_t *q = mc_alloc(cap);
        if (!q)
            return mc_error(MC_ERR_NOMEM, "tensorboard: no memory to queue %zu bytes of events",
                            need);
        if (w->queued)
            memcpy(q, w->queue, w->queued);
        mc_free(w->queue);
        w->queue = q;
        w->cap = cap;
    }
    w->queued += mc_tb_frame_record(w->queue + w->queued, w->cap - w->queued, event, len);
    if (++w->pending >= w->max_queue || wall_now() - w->last_flush >= FLUSH_SECS)
        return mc_tb_flush(w);
    return MC_OK;
}

/* Encodes the event into a buffer of its measured size, then queues the record. */
static mc_status add_event(mc_tb_writer *w, size_t len, const struct value_ctx *v, double wall,
                           int64_t step)
{
    uint8_t *e = mc_alloc(len);
    if (!e)
        return mc_error(MC_ERR_NOMEM, "tensorboard: no memory for a %zu-byte event", len);
    if (v->is_text)
        mc_tb_encode_text(e, len, wall, step, v->tag, v->text);
    else
        mc_tb_encode_scalar(e, len, wall, step, v->tag, v->simple_value);
    mc_status st = enqueue(w, e, len);
    mc_free(e);
    return st;
}

mc_status mc_tb_open(const char *log_dir, int64_t max_queue, mc_tb_writer **out)
{
    *out = NULL;
    if (!log_dir || !*log_dir)
        return mc_error(MC_ERR_CONFIG, "--tensorboard-dir: empty directory name");
    mc_tb_writer *w = mc_alloc(sizeof(*w));
    if (!w)
        return MC_ERR_NOMEM;
    memset(w, 0, sizeof(*w));
    w->max_queue = max_queue > 0 ? max_queue : 1;
    mc_status st = make_dirs(log_dir);
    if (st || (st = create_event_file(w, log_dir)))
        goto out_free;
    uint8_t ev[128];
    size_t len = mc_tb_encode_file_version(ev, sizeof(ev), wall_now());
    MC_ASSERT(len <= sizeof(ev));
    /* the file_version record goes out at once, as EventFileWriter writes it on creation */
    if ((st = enqueue(w, ev, len)) || (st = mc_tb_flush(w)))
        goto out_free;
    *out = w;
    return MC_OK;
out_free:
    if (w->f)
        fclose(w->f);
    mc_free(w->queue);
    mc_free(w->path);
    mc_free(w);
    return st;
}

mc_status mc_tb_add_scalar(mc_tb_writer *w, const char *tag, double value, int64_t step)
{
    struct value_ctx v = {.tag = tag, .suffix = "", .simple_value = (float)value};
    double wall = wall_now();
    return add_event(w, mc_tb_encode_scalar(NULL, 0, wall, step, tag, v.simple_value), &v, wall,
                     step);
}

mc_status mc_tb_add_text(mc_tb_writer *w, const char *tag, const char *text, int64_t step)
{
    struct value_ctx v = {.tag = tag, .suffix = "/text_summary", .is_text = true, .text = text};
    double wall = wall_now();
    return add_event(w, mc_tb_encode_text(NULL, 0, wall, step, tag, text), &v, wall, step);
}

mc_status mc_tb_flush(mc_tb_writer *w)
{
    if (w->queued && fwrite(w->queue, 1, w->queued, w->f) != w->queued)
        return mc_error(MC_ERR_IO, "tensorboard: cannot write %s: %s", w->path, strerror(errno));
    w->queued = 0;
    w->pending = 0;
    w->last_flush = wall_now();
    if (fflush(w->f))
        return mc_error(MC_ERR_IO, "tensorboard: cannot write %s: %s", w->path, strerror(errno));
    return MC_OK;
}

mc_status mc_tb_close(mc_tb_writer *w)
{
    if (!w)
        return MC_OK;
    mc_status st = mc_tb_flush(w);
    if (fclose(w->f) && !st)
        st = mc_error(MC_ERR_IO, "tensorboard: cannot close %s: %s", w->path, strerror(errno));
    mc_free(w->queue);
    mc_free(w->path);
    mc_free(w);
    return st;
}

const char *mc_tb_path(const mc_tb_writer *w)
{
    return w->path;
}
