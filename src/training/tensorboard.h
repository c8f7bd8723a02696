/* TensorBoard event-file writer: what torch.utils.tensorboard.SummaryWriter (add_scalar,
 * add_text, flush, close) does for Megatron-LM core_v0.12.1's training_log, in C. The file is
 * TensorFlow's TFRecord stream of Event protobufs (file_version event first, then scalar and text
 * summaries), named events.out.tfevents.<time>.<hostname>.<pid>.<n> like SummaryWriter's, so
 * TensorBoard and tensorboard's own readers open it unchanged. docs/tensorboard.md has the bytes. */
#ifndef MC_TRAINING_TENSORBOARD_H
#define MC_TRAINING_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "megatron.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mc_tb_writer mc_tb_writer;

/* SummaryWriter(log_dir, max_queue): creates log_dir (and its parents) and a new event file in
 * it holding the file_version event. Events are queued in memory and written out, whole
 * records only, when max_queue are pending, when the last write-out is 120 s old (flush_secs),
 * on mc_tb_flush and on mc_tb_close (max_queue <= 0 behaves as 1). MC_ERR_IO names the
 * directory or file that could not be made. */
MC_API mc_status mc_tb_open(const char *log_dir, int64_t max_queue, mc_tb_writer **out);
/* add_scalar(tag, value, step): a simple_value summary (value rounded to float32, as the
 * protobuf field is a float), stamped with the current wall time. */
MC_API mc_status mc_tb_add_scalar(mc_tb_writer *w, const char *tag, double value, int64_t step);
/* add_text(tag, text, step): a text-plugin summary under "<tag>/text_summary" holding one
 * string, as SummaryWriter.add_text writes it. */
MC_API mc_status mc_tb_add_text(mc_tb_writer *w, const char *tag, const char *text, int64_t step);
/* Writes the queued events and flushes the file to the kernel. */
MC_API mc_status mc_tb_flush(mc_tb_writer *w);
/* Flushes and closes (NULL-safe); returns the status of that last flush. */
MC_API mc_status mc_tb_close(mc_tb_writer *w);
/* The event file's path. */
MC_API const char *mc_tb_path(const mc_tb_writer *w);

/* ---- the encoding, exposed for the known-answer tests ------------------------------------- */
/* CRC-32C (Castagnoli, reflected 0x82F63B78) and TFRecord's masked form of it. */
MC_API uint32_t mc_tb_crc32c(const void *data, size_t n);
MC_API uint32_t mc_tb_masked_crc32c(const void *data, size_t n);
/* Serialized Event protobufs (no framing). Each returns the bytes needed (snprintf convention:
 * nothing past buf[n-1] is written). */
MC_API size_t mc_tb_encode_file_version(uint8_t *buf, size_t n, double wall_time);
MC_API size_t mc_tb_encode_scalar(uint8_t *buf, size_t n, double wall_time, int64_t step,
                                  const char *tag, float value);
MC_API size_t mc_tb_encode_text(uint8_t *buf, size_t n, double wall_time, int64_t step,
                                const char *tag, const char *text);
/* One TFRecord: u64 length, masked CRC of the length, the data, masked CRC of the data (all
 * little-endian). Returns 16 + len; writes only when n allows. */
MC_API size_t mc_tb_frame_record(uint8_t *buf, size_t n, const uint8_t *data, size_t len);

#ifdef __cplusplus
}
#endif

#endif
