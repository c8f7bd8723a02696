/* Unit tests for src/tokenizer: Megatron's _vocab_size_with_padding, NullTokenizer, the factory's
 * errors, UTF-8 "replace" decoding, the BPE engine on a hand-made model, and concurrent
 * encoding with the GPT-2 files (when shared/tokenizers/gpt2 is found). The bulk comparisons
 * with Megatron/HF/SentencePiece are the Python tests in tests/tokenizer/. */
#include "megatron/tokenizer.h"
#include "test.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_padding(void)
{
    /* spec megatron-data.md 3.1 (verified against Megatron) */
    CHECK(mc_tok_padded_vocab_size(50257, 128, 1) == 50304);
    CHECK(mc_tok_padded_vocab_size(50257, 128, 2) == 50432);
    CHECK(mc_tok_padded_vocab_size(50257, 128, 8) == 51200);
    CHECK(mc_tok_padded_vocab_size(32000, 128, 1) == 32000);
    CHECK(mc_tok_padded_vocab_size(32000, 128, 3) == 32256);
    CHECK(mc_tok_padded_vocab_size(1001, 128, 1) == 1024);
    CHECK(mc_tok_padded_vocab_size(1, 1, 1) == 1);
    CHECK(mc_tok_padded_vocab_size(128256, 128, 4) == 128512);
}

static mc_status encode_str(const mc_tokenizer *t, const char *s, struct mc_tokens *out)
{
    out->len = 0;
    return mc_tok_encode(t, s, strlen(s), out);
}

static void test_null(void)
{
    struct mc_tokenizer_args a = {.tokenizer_type = "NullTokenizer", .vocab_size = 1000};
    mc_tokenizer *t;
    CHECK(mc_tok_init(&a, &t) == MC_OK);
    CHECK(mc_tok_vocab_size(t) == 1001 && mc_tok_eod(t) == 1000 && mc_tok_pad(t) == -1);
    CHECK(strcmp(mc_tok_class_name(t), "_NullTokenizer") == 0);
    struct mc_tokens toks = {0};
    CHECK(encode_str(t, "1 22 333 7000", &toks) == MC_OK && toks.len == 4 &&
          toks.data[1] == 22 && toks.data[3] == 7000);
    /* Python int(): surrounding whitespace, signs, underscores between digits */
    CHECK(encode_str(t, "\t7\n +8 -9 1_000 \xe3\x80\x80" "5", &toks) == MC_OK && toks.len == 5 &&
          toks.data[0] == 7 && toks.data[1] == 8 && toks.data[2] == -9 && toks.data[3] == 1000 &&
          toks.data[4] == 5);
    const char *bad[] = {"", "1  2", " 1", "1 ", "x", "1_", "_1", "1__0", "1.5", "99999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mc_status st = encode_str(t, bad[i], &toks);
        CHECK(st == MC_ERR_FORMAT && strstr(mc_last_error(), "NullTokenizer"));
    }
    int64_t ids[] = {5, 0, 1000};
    char *text;
    size_t len;
    CHECK(mc_tok_decode(t, ids, 3, &text, &len) == MC_OK && strcmp(text, "5 0 1000") == 0 && len == 8);
    mc_free(text);
    CHECK(mc_tok_decode(t, ids, 0, &text, &len) == MC_OK && len == 0 && text[0] == '\0');
    mc_free(text);
    mc_free(toks.data);
    mc_tok_free(t);
    a.vocab_size = 0;
    CHECK(mc_tok_init(&a, &t) == MC_ERR_CONFIG && strstr(mc_last_error(), "--vocab-size"));
}

static void test_factory_errors(void)
{
    mc_tokenizer *t = (mc_tokenizer *)1;
    struct mc_tokenizer_args a = {.tokenizer_type = "BertWordPieceCase"};
    CHECK(mc_tok_init(&a, &t) == MC_ERR_UNSUPPORTED && t == NULL &&
          strstr(mc_last_error(), "BertWordPieceCase"));
    a.tokenizer_type = "gpt2";
    CHECK(mc_tok_init(&a, &t) == MC_ERR_CONFIG && strstr(mc_last_error(), "unknown tokenizer type"));
    a.tokenizer_type = NULL;
    CHECK(mc_tok_init(&a, &t) == MC_ERR_CONFIG);
    a.tokenizer_type = "GPT2BPETokenizer";
    CHECK(mc_tok_init(&a, &t) == MC_ERR_CONFIG && strstr(mc_last_error(), "--vocab-file"));
    a.tokenizer_type = "TikTokenizer";
    CHECK(mc_tok_init(&a, &t) == MC_ERR_CONFIG && strstr(mc_last_error(), "--tokenizer-model"));
    a.tokenizer_model = "x.json";
    CHECK(mc_tok_init(&a, &t) == MC_ERR_CONFIG && strstr(mc_last_error(), "--tiktoken-pattern"));
    a.tokenizer_model = NULL;
    a.tokenizer_type = "SentencePieceTokenizer";
    CHECK(mc_tok_init(&a, &t) == MC_ERR_CONFIG && strstr(mc_last_error(), "--tokenizer-model"));
    mc_tok_free(NULL);
}

static void check_replace(const char *in, size_t n, const char *want)
{
    char out[64];
    size_t w = mc_utf8_replace_invalid(out, (const unsigned char *)in, n);
    CHECK(w == strlen(want) && memcmp(out, want, w) == 0);
}

static void test_utf8(void)
{
#define FFFD "\xef\xbf\xbd"
    /* Python bytes.decode('utf-8', 'replace'): one U+FFFD per maximal invalid subsequence */
    check_replace("ab", 2, "ab");
    check_replace("\xab\x78", 2, FFFD "x");
    check_replace("\xe2\x82", 2, FFFD);
    check_replace("\xe2\x82\xac", 3, "\xe2\x82\xac");
    check_replace("\xe0\x80\x80", 3, FFFD FFFD FFFD);
    check_replace("\xed\xa0\x80", 3, FFFD FFFD FFFD);
    check_replace("\xf0\x9f\x98", 3, FFFD);
    check_replace("\xf0\x9f\x98x", 4, FFFD "x");
    check_replace("\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD);
    check_replace("\xc0\xaf", 2, FFFD FFFD);
    check_replace("\xff\xfe", 2, FFFD FFFD);
    CHECK(mc_uni_class_of('a') == MC_UNI_L && mc_uni_class_of('7') == MC_UNI_N);
    CHECK(mc_uni_class_of(0x3000) == MC_UNI_S && mc_uni_class_of(0x1C) == MC_UNI_O);
    CHECK(mc_uni_class_of(0x0308) == MC_UNI_O && mc_uni_class_of(0x20000) == MC_UNI_L);
    CHECK(mc_uni_class_of(0x1D7CE) == MC_UNI_N && mc_uni_class_of(0x10FFFF) == MC_UNI_O);
    for (int b = 0; b < 256; b++)
        CHECK(mc_bpe_cp_to_byte(mc_bpe_byte_to_cp((uint8_t)b)) == b);
    CHECK(mc_bpe_byte_to_cp(' ') == 0x120 && mc_bpe_byte_to_cp(173) == 0x143);
}

static void test_bpe_engine(void)
{
    /* merges: a a (0), aa a (1), b c (2); "aaaa" -> aa aa (merge all occurrences left to
     * right, then (aa, aa) has no rank); "aaa" -> aa a -> aaa */
    mc_bpe *b;
    CHECK(mc_bpe_init(&b) == MC_OK);
    int32_t a, aa, aaa, bb, cc, bc;
    CHECK(mc_bpe_symbol(b, "a", 1, &a) == MC_OK && a == 'a');
    mc_bpe_symbol(b, "b", 1, &bb);
    mc_bpe_symbol(b, "c", 1, &cc);
    CHECK(mc_bpe_add_merge(b, a, a, 0) == MC_OK);
    aa = mc_bpe_find_symbol(b, "aa", 2);
    CHECK(aa >= 256 && mc_bpe_add_merge(b, aa, a, 1) == MC_OK);
    aaa = mc_bpe_find_symbol(b, "aaa", 3);
    CHECK(mc_bpe_add_merge(b, bb, cc, 2) == MC_OK);
    bc = mc_bpe_find_symbol(b, "bc", 2);
    mc_bpe_set_id(b, a, 10);
    mc_bpe_set_id(b, aa, 11);
    mc_bpe_set_id(b, aaa, 12);
    mc_bpe_set_id(b, bc, 13);
    struct mc_tokens t = {0};
    CHECK(mc_bpe_encode_word(b, "aaaa", 4, 0, &t) == MC_OK && t.len == 2 && t.data[0] == 11 &&
          t.data[1] == 11);
    t.len = 0;
    CHECK(mc_bpe_encode_word(b, "aaa", 3, 0, &t) == MC_OK && t.len == 1 && t.data[0] == 12);
    t.len = 0;
    CHECK(mc_bpe_encode_word(b, "abcx", 4, 99, &t) == MC_OK && t.len == 3 && t.data[0] == 10 &&
          t.data[1] == 13 && t.data[2] == 99);
    t.len = 0; /* cached now: same answer */
    CHECK(mc_bpe_encode_word(b, "abcx", 4, 99, &t) == MC_OK && t.len == 3 && t.data[2] == 99);
    t.len = 0;
    CHECK(mc_bpe_encode_word(b, "x", 1, -1, &t) == MC_ERR_FORMAT);
    mc_free(t.data);
    mc_bpe_free(b);
}

static void test_gpt2_threads(void)
{
    const char *src = getenv("MC_SOURCE_DIR");
    char vocab[1024], merges[1024];
    const char *roots[] = {"%s/shared", "%s/../shared", "%s/../../shared", "/work/shared"};
    int found = 0;
    for (int i = 0; i < 4 && !found; i++) {
        char root[900];
        snprintf(root, sizeof(root), roots[i], src ? src : ".");
        snprintf(vocab, sizeof(vocab), "%s/tokenizers/gpt2/vocab.json", root);
        snprintf(merges, sizeof(merges), "%s/tokenizers/gpt2/merges.txt", root);
        found = access(vocab, R_OK) == 0 && access(merges, R_OK) == 0;
    }
    if (!found) {
        printf("test_gpt2_threads: SKIP (GPT-2 files not found)\n");
        return;
    }
    struct mc_tokenizer_args a = {.tokenizer_type = "GPT2BPETokenizer", .vocab_file = vocab,
                                  .merge_file = merges};
    mc_tokenizer *t;
    CHECK(mc_tok_init(&a, &t) == MC_OK);
    if (!t)
        return;
    const char *text = "Hello world, it's a test of the tokenizer! 東京 😀 1234\n\n  spaces";
    struct mc_tokens want = {0};
    CHECK(encode_str(t, text, &want) == MC_OK);
    int bad = 0;
#pragma omp parallel for num_threads(4) reduction(+ : bad)
    for (int i = 0; i < 400; i++) {
        struct mc_tokens got = {0};
        char buf[256];
        snprintf(buf, sizeof(buf), "%s %d", text, i % 37);
        if (mc_tok_encode(t, buf, strlen(buf), &got) != MC_OK || got.len < want.len ||
            memcmp(got.data, want.data, (size_t)(want.len - 1) * sizeof(int64_t)) != 0)
            bad++;
        mc_free(got.data);
    }
    CHECK(bad == 0);
    /* "Hello world" = [15496, 995] */
    CHECK(want.len > 2 && want.data[0] == 15496 && want.data[1] == 995);
    mc_free(want.data);
    mc_tok_free(t);
}

/* Every tokenizer type encodes the same texts identically from 4 threads at once (shared BPE
 * caches, lazily built Unicode tables) as from one. */
static void check_threads(const struct mc_tokenizer_args *a)
{
    mc_tokenizer *t;
    if (mc_tok_init(a, &t) != MC_OK) {
        fprintf(stderr, "%s %s: %s\n", a->tokenizer_type, a->tokenizer_model, mc_last_error());
        CHECK(0);
        return;
    }
    enum { N = 64 };
    static char texts[N][160];
    struct mc_tokens want[N];
    for (int i = 0; i < N; i++) {
        snprintf(texts[i], sizeof(texts[i]), "Doc %d: the license grants rights %d times, "
                 "caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac %x \xf0\x9f\x98\x80 it's %d%d",
                 i, i * 7, i * 12345, i, i % 3);
        want[i] = (struct mc_tokens){0};
        CHECK(mc_tok_encode(t, texts[i], strlen(texts[i]), &want[i]) == MC_OK);
    }
    int bad = 0;
#pragma omp parallel for num_threads(4) reduction(+ : bad) schedule(dynamic)
    for (int r = 0; r < 8 * N; r++) {
        int i = (r * 17) % N;
        struct mc_tokens got = {0};
        if (mc_tok_encode(t, texts[i], strlen(texts[i]), &got) != MC_OK || got.len != want[i].len ||
            memcmp(got.data, want[i].data, (size_t)got.len * sizeof(int64_t)) != 0)
            bad++;
        mc_free(got.data);
    }
    CHECK(bad == 0);
    for (int i = 0; i < N; i++)
        mc_free(want[i].data);
    mc_tok_free(t);
}

static void test_all_types_threads(void)
{
    const char *src = getenv("MC_SOURCE_DIR");
    char path[3][1024];
    const char *gold = "tests/golden/tokenizer";
    snprintf(path[0], sizeof(path[0]), "%s/%s/hf_llama3", src ? src : "..", gold);
    snprintf(path[1], sizeof(path[1]), "%s/%s/hf_llama2", src ? src : "..", gold);
    snprintf(path[2], sizeof(path[2]), "%s/%s/spm/uni_nfkc.model", src ? src : "..", gold);
    if (access(path[2], R_OK) != 0) {
        printf("test_all_types_threads: SKIP (goldens not found under %s)\n", src ? src : "..");
        return;
    }
    struct mc_tokenizer_args a = {.tokenizer_type = "HuggingFaceTokenizer", .tokenizer_model = path[0]};
    check_threads(&a);
    a.tokenizer_model = path[1];
    check_threads(&a);
    a.tokenizer_type = "SentencePieceTokenizer";
    a.tokenizer_model = path[2];
    check_threads(&a);
}

int main(void)
{
    test_padding();
    test_null();
    test_factory_errors();
    test_utf8();
    test_bpe_engine();
    test_gpt2_threads();
    test_all_types_threads();
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("test_tokenizer");
}
