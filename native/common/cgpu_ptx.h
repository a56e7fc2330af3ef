/* PTX modules' globals, read alike by the shim (to charge them before the driver compiles and
 * loads the module) and the simulator (to allocate them as the driver does).
 *
 * The driver compiles PTX (a text image handed to cuModuleLoadData, cuModuleLoad of a .ptx
 * file, cuLibraryLoadData, or a fatbin's PTX entry where it has no cubin for the device) with
 * ptxas and loads the cubin.  The globals are the module-scope variables of state spaces
 * .global (with `.attribute(.managed)` too) and .const, .extern ones included (compiling a
 * whole program, ptxas defines an extern that nothing resolves), laid out as ptxas lays them
 * out (checked against ptxas: tests/shim/test_ptx_globals.py):
 *   - .nv.global (no initialiser) and .nv.global.init (with one): the variables by alignment,
 *     largest first, and by size, smallest first, among equal alignments;
 *   - .nv.constant3: the .const variables in the order they are declared, those other modules
 *     may see (.visible, .weak, .common, .extern) first;
 *   - .nv.constant4: the address of each .global variable and of each function the module
 *     calls in the driver (`.extern .func`: vprintf, malloc, __assertfail), 8 bytes each (none
 *     in a debug build: `.target sm_90, debug`; one the JIT is asked for by option is not
 *     seen, and is charged the bank: over, never under);
 * the two banks first (in an order that follows the code ptxas generates: the one of the two
 * that makes the larger total is taken), then .nv.global.init, then .nv.global, each aligned
 * to its largest variable (the address bank to 8).  A variable's size is its type's (times
 * .v2/.v4/.v8) times its dimensions; `[]` takes its count from the initialiser.  Its
 * alignment is `.align N`, else its element's size.
 *
 * What the compiler adds itself (its own constants, in bank 2) cannot be read from the text and
 * is not counted.  A type this reader does not know counts 16 bytes an element (over, never
 * under).  Off every hot path: loads only.  The reader is cgpu_ptx.c. */
#ifndef CGPU_PTX_H
#define CGPU_PTX_H

#include <stddef.h>
#include <stdint.h>

#define CGPU_PTX_MAX (1ULL << 40) /* a variable or module larger than this is taken as this */

enum cgpu_ptx_space { CGPU_PTX_GLOBAL = 0, CGPU_PTX_GLOBAL_INIT, CGPU_PTX_CONST, CGPU_PTX_SPACES };

struct cgpu_ptx_var {
    const char *name; /* in the text, not terminated */
    uint32_t name_len;
    uint32_t order; /* declaration order */
    unsigned space; /* enum cgpu_ptx_space */
    unsigned linked; /* .visible, .weak, .common or .extern: seen by other modules */
    uint64_t size, align;
    uint64_t offset; /* from the start of the module's globals, set by cgpu_ptx_layout */
};

/* What else of a module decides its layout. */
struct cgpu_ptx_info {
    int debug;               /* its target asks for a debug build (`.target sm_90, debug`) */
    uint64_t extern_funcs;   /* functions it calls in the driver (`.extern .func`: vprintf, ...) */
};

/* Whether an image of unknown length may be PTX text, worth reading up to its NUL: its first
 * byte starts a comment, a directive or a blank (PTX from nvcc, Triton and fatbins starts with
 * `//`, blank lines or .version).  The shim and the simulator tell images apart alike by it. */
int cgpu_ptx_may_be_text(const unsigned char *img);

/* Whether `text` (`len` bytes) is PTX: its first token (past comments) is .version. */
int cgpu_ptx_text(const char *text, size_t len);

/* The module-scope variables PTX `text` (`len` bytes) defines, in order: at most `cap` written
 * to `out`; returns how many there are (call with cap 0 to count).  The rest of what decides
 * the layout in *info. */
size_t cgpu_ptx_vars(const char *text, size_t len, struct cgpu_ptx_var *out, size_t cap, struct cgpu_ptx_info *info);

/* Lay out `n` variables of a module as ptxas does: each one's offset from the start of the
 * module's globals; returns their total (the sections', each aligned, as the shim reads a
 * cubin's).  The array is left in declaration order. */
uint64_t cgpu_ptx_layout(struct cgpu_ptx_var *vars, size_t n, const struct cgpu_ptx_info *info);

/* The total of PTX `text`'s globals (0 if it is not PTX, or declares none). */
uint64_t cgpu_ptx_globals(const char *text, size_t len);

#endif
