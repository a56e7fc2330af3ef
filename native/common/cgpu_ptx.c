/* PTX modules' globals: the reader the shim and the simulator share (cgpu_ptx.h says how ptxas
 * lays them out). */
#include "cgpu_ptx.h"

#include <stdlib.h>
#include <string.h>

struct ptx_lex {
    const char *p, *end;
    const char *tok; /* the current token: [tok, tok + len) */
    size_t len;
};

static int ptx_word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
           c == '%' || c == '.';
}

/* The next token (a word, a directive, a number, or one character), past spaces, comments
 * and strings; 0 at the end. */
static int ptx_next(struct ptx_lex *lx)
{
    const char *p = lx->p, *end = lx->end;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v'))
            p++;
        if (p + 1 < end && p[0] == '/' && p[1] == '/') {
            while (p < end && *p != '\n')
                p++;
        } else if (p + 1 < end && p[0] == '/' && p[1] == '*') {
            p += 2;
            while (p + 1 < end && !(p[0] == '*' && p[1] == '/'))
                p++;
            p = p + 1 < end ? p + 2 : end;
        } else if (p < end && *p == '"') {
            for (p++; p < end && *p != '"' && *p != '\n'; p++)
                if (*p == '\\' && p + 1 < end)
                    p++;
            if (p < end)
                p++;
        } else {
            break;
        }
    }
    lx->tok = p;
    if (p >= end) {
        lx->len = 0;
        lx->p = end;
        return 0;
    }
    const char *q = p + 1;
    if (ptx_word_char(*p))
        while (q < end && ptx_word_char(*q))
            q++;
    lx->len = (size_t)(q - p);
    lx->p = q;
    return 1;
}

static int ptx_is(const struct ptx_lex *lx, const char *word)
{
    size_t n = strlen(word);
    return lx->len == n && !memcmp(lx->tok, word, n);
}

/* An unsigned number token (decimal, 0x hexadecimal, 0 octal), or `fail` if it is none. */
static uint64_t ptx_number(const struct ptx_lex *lx, uint64_t fail)
{
    const char *p = lx->tok, *end = lx->tok + lx->len;
    unsigned base = 10;
    if (end - p > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        base = 16, p += 2;
    else if (end - p > 1 && p[0] == '0')
        base = 8, p++;
    if (end > p && end[-1] == 'U')
        end--;
    if (p >= end)
        return fail;
    uint64_t v = 0;
    for (; p < end; p++) {
        unsigned d = *p >= '0' && *p <= '9' ? (unsigned)(*p - '0')
                     : *p >= 'a' && *p <= 'f' ? (unsigned)(*p - 'a' + 10)
                     : *p >= 'A' && *p <= 'F' ? (unsigned)(*p - 'A' + 10)
                                              : 99;
        if (d >= base)
            return fail;
        if (v > (CGPU_PTX_MAX - d) / base)
            return CGPU_PTX_MAX;
        v = v * base + d;
    }
    return v;
}

/* The bytes of a fundamental type's element, 0 if the token is not a type, 16 for a type this
 * reader does not know (a directive of 2 to 8 letters past a known type's prefix). */
static uint64_t ptx_type_size(const struct ptx_lex *lx)
{
    static const struct {
        const char *name;
        unsigned size;
    } types[] = {
        {".b8", 1},     {".u8", 1},     {".s8", 1},       {".b16", 2},      {".u16", 2},  {".s16", 2},
        {".f16", 2},    {".bf16", 2},   {".e4m3x2", 2},   {".e5m2x2", 2},   {".b32", 4},  {".u32", 4},
        {".s32", 4},    {".f32", 4},    {".f16x2", 4},    {".bf16x2", 4},   {".tf32", 4}, {".b64", 8},
        {".u64", 8},    {".s64", 8},    {".f64", 8},      {".b128", 16},    {".pred", 1},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (ptx_is(lx, types[i].name))
            return types[i].size;
    if (lx->len >= 3 && lx->tok[0] == '.' &&
        (lx->tok[1] == 'b' || lx->tok[1] == 'u' || lx->tok[1] == 's' || lx->tok[1] == 'f' || lx->tok[1] == 'e') &&
        lx->tok[2] >= '0' && lx->tok[2] <= '9')
        return 16;
    return 0;
}

static uint64_t ptx_mul(uint64_t a, uint64_t b)
{
    return a && b > CGPU_PTX_MAX / a ? CGPU_PTX_MAX : a * b;
}

/* Skip a bracketed run whose opening token is current: to past its matching close. */
static void ptx_skip_block(struct ptx_lex *lx, char open, char close)
{
    unsigned depth = 1;
    while (depth && ptx_next(lx)) {
        if (lx->len == 1 && lx->tok[0] == open)
            depth++;
        else if (lx->len == 1 && lx->tok[0] == close)
            depth--;
    }
}

/* An initialiser, the `=` current: to its end (the `,` or `;` after it, current then).  Counts
 * its elements: *items its scalars (a scalar starts after `{` or `,`), *outer those at its
 * top level (a brace within counts one), and *nested whether it has braces within. */
static void ptx_initialiser(struct ptx_lex *lx, uint64_t *items, uint64_t *outer, int *nested)
{
    unsigned depth = 0;
    char prev = '=';
    *items = *outer = 0;
    *nested = 0;
    while (ptx_next(lx)) {
        char c = lx->len == 1 ? lx->tok[0] : 'a';
        if (!depth && (c == ',' || c == ';'))
            return;
        int starts = depth >= 1 && (prev == '{' || prev == ',');
        if (starts && depth == 1 && c != '}')
            (*outer)++;
        if (c == '{') {
            *nested |= depth >= 1;
            depth++;
        } else if (c == '}') {
            depth -= depth > 0;
        } else if (starts && c != ',') {
            (*items)++;
        }
        prev = c;
    }
}

/* The variables of the declaration whose state space (.global or .const) is current: each is
 * written to out[n..] while n < cap; returns the new n. */
static size_t ptx_declaration(struct ptx_lex *lx, int is_const, int linked, struct cgpu_ptx_var *out, size_t cap,
                              size_t n)
{
    uint64_t align = 0, elem = 0, vec = 1;
    int started = 0;
    while (ptx_next(lx)) {
        if (ptx_is(lx, ";"))
            return n;
        if (ptx_is(lx, ".align")) {
            if (ptx_next(lx))
                align = ptx_number(lx, 0);
        } else if (ptx_is(lx, ".attribute")) {
            if (ptx_next(lx) && ptx_is(lx, "("))
                ptx_skip_block(lx, '(', ')');
        } else if (ptx_is(lx, ".v2") || ptx_is(lx, ".v4") || ptx_is(lx, ".v8")) {
            vec = (uint64_t)(lx->tok[2] - '0');
        } else if (!started && lx->tok[0] == '.' && lx->len > 1) {
            uint64_t t = ptx_type_size(lx);
            if (t)
                elem = t;
        } else if (lx->tok[0] != '.' && !(lx->tok[0] >= '0' && lx->tok[0] <= '9') && ptx_word_char(lx->tok[0])) {
            /* a declarator: name, dimensions, initialiser */
            started = 1;
            struct cgpu_ptx_var v = {lx->tok, (uint32_t)(lx->len < 0xffffffffu ? lx->len : 0xffffffffu), 0, 0,
                                     (unsigned)linked, 0, 0, 0};
            uint64_t unit = ptx_mul(elem ? elem : 16, vec), dims = 1, inner = 1;
            int open_dim = 0, has_init = 0, ended = 0;
            uint64_t items = 0, outer = 0;
            int nested = 0;
            while (ptx_next(lx)) {
                if (ptx_is(lx, "[")) {
                    uint64_t d = 0;
                    int have = 0;
                    while (ptx_next(lx) && !ptx_is(lx, "]"))
                        d = ptx_number(lx, CGPU_PTX_MAX), have = 1;
                    if (!have && dims == 1 && !open_dim)
                        open_dim = 1;
                    else if (open_dim)
                        inner = ptx_mul(inner, d);
                    else
                        dims = ptx_mul(dims, d);
                } else if (ptx_is(lx, "=")) {
                    has_init = 1;
                    ptx_initialiser(lx, &items, &outer, &nested);
                    ended = ptx_is(lx, ";");
                    break;
                } else if (ptx_is(lx, "<")) {
                    ptx_skip_block(lx, '<', '>'); /* a parameterised name: registers only */
                } else if (ptx_is(lx, ",") || ptx_is(lx, ";")) {
                    ended = ptx_is(lx, ";");
                    break;
                }
            }
            if (open_dim) {
                uint64_t count = nested ? outer : (inner ? (items + inner - 1) / inner : 0);
                dims = ptx_mul(count, inner);
            }
            v.size = ptx_mul(unit, dims);
            v.align = align ? align : unit;
            if (v.align & (v.align - 1) || v.align > 4096) /* not a power of two: the next one */
                for (uint64_t a = 1;; a <<= 1)
                    if (a >= v.align || a >= 4096) {
                        v.align = a;
                        break;
                    }
            v.space = is_const ? CGPU_PTX_CONST : has_init ? CGPU_PTX_GLOBAL_INIT : CGPU_PTX_GLOBAL;
            v.order = (uint32_t)n;
            if (n < cap)
                out[n] = v;
            n++;
            if (ended)
                return n;
        }
    }
    return n;
}

int cgpu_ptx_may_be_text(const unsigned char *img)
{
    return img && (img[0] == '/' || img[0] == '.' || img[0] == '\n' || img[0] == '\r' || img[0] == ' ' ||
                   img[0] == '\t');
}

int cgpu_ptx_text(const char *text, size_t len)
{
    struct ptx_lex lx = {text, text + len, text, 0};
    return text && ptx_next(&lx) && ptx_is(&lx, ".version");
}

size_t cgpu_ptx_vars(const char *text, size_t len, struct cgpu_ptx_var *out, size_t cap, struct cgpu_ptx_info *info)
{
    info->debug = 0;
    info->extern_funcs = 0;
    if (!cgpu_ptx_text(text, len))
        return 0;
    struct ptx_lex lx = {text, text + len, text, 0};
    size_t n = 0;
    int linked = 0;
    while (ptx_next(&lx)) {
        if (ptx_is(&lx, ".target")) {
            /* its options: words and commas, up to the next directive (left for the loop) */
            struct ptx_lex at = lx;
            while (ptx_next(&lx) &&
                   (ptx_is(&lx, ",") || (lx.tok[0] != '.' && ptx_word_char(lx.tok[0])))) {
                if (ptx_is(&lx, "debug"))
                    info->debug = 1;
                at = lx;
            }
            lx = at;
            linked = 0;
        } else if (ptx_is(&lx, "{")) {
            ptx_skip_block(&lx, '{', '}'); /* a function's body, or a .section's data */
            linked = 0;
        } else if (ptx_is(&lx, ".extern")) {
            linked = 2;
        } else if (ptx_is(&lx, ".visible") || ptx_is(&lx, ".weak") || ptx_is(&lx, ".common")) {
            linked = linked ? linked : 1;
        } else if (ptx_is(&lx, ".func")) {
            info->extern_funcs += linked == 2;
            linked = 0;
        } else if (ptx_is(&lx, ".global") || ptx_is(&lx, ".const")) {
            n = ptx_declaration(&lx, ptx_is(&lx, ".const"), linked != 0, out, cap, n);
            linked = 0;
        } else {
            linked = 0;
        }
    }
    return n;
}

static int ptx_packing_order(const void *a, const void *b)
{
    const struct cgpu_ptx_var *x = a, *y = b;
    if (x->space != y->space)
        return x->space < y->space ? -1 : 1;
    if (x->space != CGPU_PTX_CONST) {
        if (x->align != y->align)
            return x->align > y->align ? -1 : 1;
        if (x->size != y->size)
            return x->size < y->size ? -1 : 1;
    } else if (x->linked != y->linked) {
        return x->linked ? -1 : 1;
    }
    return x->order < y->order ? -1 : x->order > y->order;
}

static int ptx_declared_order(const void *a, const void *b)
{
    const struct cgpu_ptx_var *x = a, *y = b;
    return x->order < y->order ? -1 : x->order > y->order;
}

static uint64_t ptx_align_up(uint64_t v, uint64_t a)
{
    return v >= CGPU_PTX_MAX ? CGPU_PTX_MAX : (v + a - 1) & ~(a - 1);
}

uint64_t cgpu_ptx_layout(struct cgpu_ptx_var *vars, size_t n, const struct cgpu_ptx_info *info)
{
    qsort(vars, n, sizeof *vars, ptx_packing_order);
    uint64_t size[CGPU_PTX_SPACES] = {0}, align[CGPU_PTX_SPACES] = {1, 1, 1};
    size_t globals = 0;
    for (size_t i = 0; i < n; i++) {
        struct cgpu_ptx_var *v = &vars[i];
        v->offset = ptx_align_up(size[v->space], v->align);
        size[v->space] = v->offset + v->size > CGPU_PTX_MAX ? CGPU_PTX_MAX : v->offset + v->size;
        if (v->align > align[v->space])
            align[v->space] = v->align;
        globals += v->space != CGPU_PTX_CONST;
    }
    /* The sections as ptxas orders them: the two constant banks (the addresses of the .global
     * variables, bank 4, and the .const ones, bank 3), then the initialised globals, then the
     * zero-filled.  Which bank comes first follows the code ptxas generates, not the text: the
     * order that makes the larger total is taken (over by less than bank 3's alignment, never
     * under). */
    const uint64_t addresses = info->debug ? 0 : ptx_mul(globals + info->extern_funcs, 8);
    uint64_t total = 0, base[CGPU_PTX_SPACES] = {0};
    for (int addresses_first = 0; addresses_first < 2; addresses_first++) {
        uint64_t at = addresses_first ? addresses : 0, where[CGPU_PTX_SPACES];
        static const unsigned order[] = {CGPU_PTX_CONST, CGPU_PTX_GLOBAL_INIT, CGPU_PTX_GLOBAL};
        for (size_t k = 0; k < 3; k++) {
            unsigned s = order[k];
            if (k == 1 && !addresses_first && addresses)
                at = ptx_align_up(at, 8) + addresses;
            where[s] = size[s] ? ptx_align_up(at, align[s]) : at;
            at = where[s] + size[s] > CGPU_PTX_MAX ? CGPU_PTX_MAX : where[s] + size[s];
        }
        if (at > total || !addresses_first) {
            total = at;
            memcpy(base, where, sizeof base);
        }
    }
    for (size_t i = 0; i < n; i++)
        vars[i].offset += base[vars[i].space];
    qsort(vars, n, sizeof *vars, ptx_declared_order);
    return total;
}

uint64_t cgpu_ptx_globals(const char *text, size_t len)
{
    struct cgpu_ptx_info info;
    size_t n = cgpu_ptx_vars(text, len, NULL, 0, &info);
    if (!n && !info.extern_funcs)
        return 0;
    struct cgpu_ptx_var *vars = malloc((n ? n : 1) * sizeof *vars);
    if (!vars)
        return 0;
    uint64_t total = cgpu_ptx_layout(vars, cgpu_ptx_vars(text, len, vars, n, &info), &info);
    free(vars);
    return total;
}
