/* zo_incbin.h - a binary file of the bundle linked as a read-only array.
 *
 * Large constant data (the model's weights and kernel parameters, the training data) stays in
 * .bin files beside the C sources: no C array text to write or to compile (megabytes of data
 * cost the build nothing but the assembler's copy).  Each array is in a section
 * .rodata.<name> of the object that includes it, where link.ld places that object's read-only
 * data, 16-byte aligned (as ZO_CONST_ATTR aligns C arrays: the Helium kernels' vector loads).
 * The file is found relative to the directory the compiler runs in (the bundle's, as its
 * Makefile runs).  Needs an ELF toolchain (GCC or Clang).
 */
#ifndef ZO_INCBIN_H
#define ZO_INCBIN_H

#ifndef __ELF__
#error "zo_incbin.h needs an ELF toolchain (GCC or Clang on Linux or bare metal)"
#endif

/* Defines `name` (declare it as `extern const T name[N];`) with `count` bytes of `file` from
 * byte `skip` on: several arrays share one file. */
#define ZO_INCBIN_SLICE(name, file, skip, count)                    \
    __asm__(".section .rodata." #name ",\"a\",%progbits\n"          \
            ".balign 16\n"                                          \
            ".globl " #name "\n"                                    \
            ".type " #name ", %object\n" #name ":\n"                \
            ".incbin \"" file "\", " #skip ", " #count "\n"         \
            ".size " #name ", . - " #name "\n"                      \
            ".previous\n")

/* The same in the input section `section` (a string), for a linker script that places it apart. */
#define ZO_INCBIN_SECTION(name, file, section)                      \
    __asm__(".section " section ",\"a\",%progbits\n"                \
            ".balign 16\n"                                          \
            ".globl " #name "\n"                                    \
            ".type " #name ", %object\n" #name ":\n"                \
            ".incbin \"" file "\"\n"                                \
            ".size " #name ", . - " #name "\n"                      \
            ".previous\n")

/* Defines `name` (declare it as `extern const T name[N];`) with the bytes of `file`. */
#define ZO_INCBIN(name, file) ZO_INCBIN_SECTION(name, file, ".rodata." #name)

#endif /* ZO_INCBIN_H */
