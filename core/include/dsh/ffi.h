/* ffi.h: the declarations of the FFI surface, carried by libdsh.so itself.
 *
 * At build time every header in core/include/dsh is run through the C
 * preprocessor (core/ffi/cdefs.cmake) into plain C declarations for LuaJIT's
 * ffi.cdef: prototypes, opaque and plain structs, and enums, the status enum
 * expanded from its X-macro. The text is compiled into the library, so the
 * declarations Lua loads always come from the headers the library was built
 * from. The same list of functions is the library's linker version script:
 * what is declared here is exported, and nothing else. */
#ifndef DSH_FFI_H
#define DSH_FFI_H

/* The declarations, NUL-terminated; a static string. */
const char *dsh_ffi_cdefs(void);

#endif
