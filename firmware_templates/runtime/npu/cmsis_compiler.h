/* cmsis_compiler.h - the two CMSIS-Core intrinsics Arm's Ethos-U core driver uses (__WFE while it
 * waits for the NPU's interrupt, __SEV from the handler), for builds without CMSIS-Core on the
 * include path.  Only the driver's sources see this folder; a real CMSIS-Core given with
 * --device-headers comes first. */
#ifndef ZO_CMSIS_COMPILER_STANDIN_H
#define ZO_CMSIS_COMPILER_STANDIN_H

#define __WFE() __asm volatile("wfe")
#define __SEV() __asm volatile("sev")

#endif /* ZO_CMSIS_COMPILER_STANDIN_H */
