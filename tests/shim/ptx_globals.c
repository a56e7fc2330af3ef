/* Prints what native/common/cgpu_ptx.c reads of each PTX file named: the total of its globals,
 * then a line per variable (name, offset, size, alignment), for tests/shim/test_ptx_globals.py
 * to check against ptxas's own layout. */
#include "cgpu_ptx.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f)
            return 2;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        rewind(f);
        char *text = malloc(len > 0 ? (size_t)len : 1);
        size_t got = text && len > 0 ? fread(text, 1, (size_t)len, f) : 0;
        fclose(f);
        struct cgpu_ptx_info info;
        size_t n = cgpu_ptx_vars(text, got, NULL, 0, &info);
        struct cgpu_ptx_var *vars = calloc(n ? n : 1, sizeof *vars);
        if (!vars)
            return 2;
        n = cgpu_ptx_vars(text, got, vars, n, &info);
        printf("module %s %llu\n", argv[i], (unsigned long long)cgpu_ptx_layout(vars, n, &info));
        for (size_t k = 0; k < n; k++)
            printf("var %.*s %llu %llu %llu\n", (int)vars[k].name_len, vars[k].name,
                   (unsigned long long)vars[k].offset, (unsigned long long)vars[k].size,
                   (unsigned long long)vars[k].align);
        free(vars);
        free(text);
    }
    return 0;
}
