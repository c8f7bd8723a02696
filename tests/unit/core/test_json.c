/* Tests for src/core/json.c: Python json.loads semantics (what Megatron's readers accept and
 * refuse), line/column error messages, arena reuse, and json.dumps-compatible writing. */
#include "core/json.h"
#include "test.h"

#include <math.h>
#include <string.h>

static mc_json_doc *doc;

static const struct mc_json *parse(const char *s)
{
    mc_status st = mc_json_doc_parse(doc, s, strlen(s), "t.json", 1);
    return st == MC_OK ? mc_json_doc_root(doc) : NULL;
}

/* The parse must fail and the message must contain `want`. */
static void check_error(const char *s, const char *want)
{
    mc_status st = mc_json_doc_parse(doc, s, strlen(s), "t.json", 1);
    CHECK(st == MC_ERR_FORMAT);
    if (!strstr(mc_last_error(), want)) {
        fprintf(stderr, "input %s: error '%s' lacks '%s'\n", s, mc_last_error(), want);
        CHECK(0);
    }
}

static void test_values(void)
{
    const struct mc_json *r = parse(" {\"a\": [1, -2.5e3, true, false, null, \"x\\ty\"], \"b\": {}} ");
    CHECK(r && r->type == MC_JSON_OBJECT && r->len == 2);
    const struct mc_json *a = mc_json_get(r, "a");
    CHECK(a && a->type == MC_JSON_ARRAY && a->len == 6);
    if (a && a->len == 6) {
        CHECK(a->items[0].is_int && a->items[0].inum == 1);
        CHECK(!a->items[1].is_int && a->items[1].num == -2500.0);
        CHECK(a->items[2].type == MC_JSON_TRUE && a->items[3].type == MC_JSON_FALSE);
        CHECK(a->items[4].type == MC_JSON_NULL);
        CHECK(a->items[5].len == 3 && strcmp(a->items[5].str, "x\ty") == 0);
    }
    CHECK(mc_json_get(r, "b")->len == 0);
    CHECK(mc_json_get(r, "c") == NULL);

    /* duplicate keys: the last wins (Python dict) */
    r = parse("{\"k\": 1, \"k\": 2}");
    CHECK(r && mc_json_get(r, "k")->inum == 2);
    /* escapes, surrogate pairs, raw UTF-8, an escaped NUL */
    r = parse("\"\\u00e9\\ud83d\\ude00\\/\\\\\\\"\xe4\xb8\xad\\u0000z\"");
    CHECK(r && r->len == 2 + 4 + 1 + 1 + 1 + 3 + 1 + 1);
    CHECK(r && memcmp(r->str, "\xc3\xa9\xf0\x9f\x98\x80/\\\"\xe4\xb8\xad\0z", 15) == 0);
    /* Python extensions */
    r = parse("[NaN, Infinity, -Infinity, -0, 12345678901234567890]");
    CHECK(r && isnan(r->items[0].num) && isinf(r->items[1].num) && r->items[2].num < 0);
    CHECK(r && r->items[3].is_int && r->items[3].inum == 0);
    CHECK(r && !r->items[4].is_int && r->items[4].num == 12345678901234567890.0);
    CHECK(r && strcmp(r->items[4].str, "12345678901234567890") == 0);
    /* deep but allowed nesting */
    char deep[2 * 900 + 1];
    memset(deep, '[', 900);
    memset(deep + 900, ']', 900);
    deep[1800] = '\0';
    CHECK(parse(deep) != NULL);
}

static void test_errors(void)
{
    check_error("[1, 2,]", "t.json:1:7: invalid JSON: trailing comma");
    check_error("{\"a\": 1,}", "trailing comma");
    check_error("{\n  \"a\": 1\n  \"b\": 2}", "t.json:3:3: invalid JSON: expected ',' or '}'");
    check_error("[01]", "expected ',' or ']'");
    check_error("[1.]", "digit after '.'");
    check_error("[1e]", "exponent");
    check_error("\"a\tb\"", "control character 0x09");
    check_error("\"abc", "unterminated string");
    check_error("\"\\x\"", "invalid escape");
    check_error("\"\\u12\"", "4 hex digits");
    check_error("\"\\ud800\"", "lone surrogate");
    check_error("\"\\udc00\\ud800\"", "lone surrogate");
    check_error("\"\xff\"", "invalid UTF-8 byte 0xff");
    check_error("\"\xc0\xaf\"", "invalid UTF-8"); /* overlong */
    check_error("\xEF\xBB\xBF{}", "byte order mark");
    check_error("{} x", "extra data");
    check_error("", "found end of input");
    check_error("[1 // c\n]", "found '/'");
    check_error("{'a': 1}", "member name in double quotes");
    check_error("nul", "expected a value");
    check_error("Inf", "expected a value");
    char deep[2 * 1100 + 1];
    memset(deep, '[', 1100);
    memset(deep + 1100, ']', 1100);
    deep[2200] = '\0';
    check_error(deep, "nesting deeper than 1000");
    /* first_line offsets the reported line (JSONL line 41) */
    mc_status st = mc_json_doc_parse(doc, "{\"a\" 1}", 7, "in.jsonl", 41);
    CHECK(st == MC_ERR_FORMAT && strstr(mc_last_error(), "in.jsonl:41:6:"));
}

static void check_write_double(double v, const char *want)
{
    struct mc_json_buf b = {0};
    CHECK(mc_json_write_double(&b, v) == MC_OK);
    if (strcmp(b.data, want) != 0) {
        fprintf(stderr, "repr(%.17g): got %s want %s\n", v, b.data, want);
        CHECK(0);
    }
    mc_free(b.data);
}

static void test_write(void)
{
    struct mc_json_buf b = {0};
    const char s[] = "a\"\\\n\r\t\b\f\x01/\xc3\xa9\xf0\x9f\x98\x80";
    CHECK(mc_json_write_string(&b, s, sizeof(s) - 1, true) == MC_OK);
    CHECK(strcmp(b.data, "\"a\\\"\\\\\\n\\r\\t\\b\\f\\u0001/\\u00e9\\ud83d\\ude00\"") == 0);
    b.len = 0;
    CHECK(mc_json_write_string(&b, s, sizeof(s) - 1, false) == MC_OK);
    CHECK(strcmp(b.data, "\"a\\\"\\\\\\n\\r\\t\\b\\f\\u0001/\xc3\xa9\xf0\x9f\x98\x80\"") == 0);
    CHECK(mc_json_write_string(&b, "\xff", 1, true) == MC_ERR_FORMAT);
    /* round trip through the parser */
    b.len = 0;
    CHECK(mc_json_write_string(&b, s, sizeof(s) - 1, true) == MC_OK);
    const struct mc_json *r = parse(b.data);
    CHECK(r && r->len == (int64_t)sizeof(s) - 1 && memcmp(r->str, s, sizeof(s) - 1) == 0);
    mc_free(b.data);

    check_write_double(0.969, "0.969");
    check_write_double(0.1 + 0.2, "0.30000000000000004");
    check_write_double(1.0, "1.0");
    check_write_double(1.0 / 3.0, "0.3333333333333333");
    check_write_double(1e-05, "1e-05");
    check_write_double(0.0001, "0.0001");
    check_write_double(1e16, "1e+16");
    check_write_double(1e15, "1000000000000000.0");
    check_write_double(123456789012345678.0, "1.2345678901234568e+17");
    check_write_double(-2.5, "-2.5");
    check_write_double(0.0, "0.0");
    check_write_double(-0.0, "-0.0");
    check_write_double(1.5e-300, "1.5e-300");
    check_write_double(NAN, "NaN");
    check_write_double(-INFINITY, "-Infinity");
}

int main(void)
{
    CHECK(mc_json_doc_init(&doc) == MC_OK);
    test_values();
    test_errors();
    test_write();
    mc_json_doc_free(doc);
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("test_json");
}
