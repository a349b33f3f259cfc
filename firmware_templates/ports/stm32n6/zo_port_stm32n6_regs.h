/* zo_port_stm32n6_regs.h - the STM32N657 register facts the stm32n6 port uses: Secure-alias base
 * addresses, register offsets, bit masks and positions, one ZO_ name each.
 *
 * Two sources, the same names:
 *  - by default the port's own numbers (below), written from the reference manual (RM0486) and
 *    checked equal to ST's stm32n657xx.h (cmsis-device-n6 v1.1.0, commit f818b00f775444e8) by
 *    tests/test_n6_regs.py against tests/fixtures/stm32n657xx_facts.toml (values read from that
 *    header, so the check runs without it);
 *  - with ZO_DEVICE_HEADERS (`zoflash build --device-headers PATH`) ST's header itself, whose
 *    Secure aliases (*_BASE_S) exist only under CPU_IN_SECURE_STATE, which it sets from -mcmse:
 *    the core runs Secure, so the port says so without building Secure-gateway code.
 * Not in the header, so the port's own in both: USART1SEL = 6 (HSI, from the HAL's
 * documentation) and the XSPI field values (memory type, modes, sizes: RM0486 XSPI chapter).
 */
#ifndef ZO_PORT_STM32N6_REGS_H
#define ZO_PORT_STM32N6_REGS_H

#include <stdint.h>

#ifdef ZO_DEVICE_HEADERS
#include <stddef.h>
#ifndef CPU_IN_SECURE_STATE
#define CPU_IN_SECURE_STATE
#endif
#include "stm32n657xx.h"

#define ZO_RCC_BASE           RCC_BASE_S
#define ZO_PWR_BASE           PWR_BASE_S
#define ZO_RAMCFG_BASE        RAMCFG_BASE_S
#define ZO_RAMCFG_STRIDE      (RAMCFG_SRAM2_AXI_BASE_S - RAMCFG_SRAM1_AXI_BASE_S)
#define ZO_GPIOE_BASE         GPIOE_BASE_S
#define ZO_GPION_BASE         GPION_BASE_S
#define ZO_USART1_BASE        USART1_BASE_S
#define ZO_XSPI2_BASE         XSPI2_BASE_S

#define ZO_RCC_CCIPR6         offsetof(RCC_TypeDef, CCIPR6)
#define ZO_RCC_CCIPR13        offsetof(RCC_TypeDef, CCIPR13)
#define ZO_RCC_MEMENR         offsetof(RCC_TypeDef, MEMENR)
#define ZO_RCC_AHB2ENR        offsetof(RCC_TypeDef, AHB2ENR)
#define ZO_RCC_AHB4ENR        offsetof(RCC_TypeDef, AHB4ENR)
#define ZO_RCC_AHB5ENR        offsetof(RCC_TypeDef, AHB5ENR)
#define ZO_RCC_APB2ENR        offsetof(RCC_TypeDef, APB2ENR)
#define ZO_RCC_MEMENSR        offsetof(RCC_TypeDef, MEMENSR)
#define ZO_RCC_AHB2ENSR       offsetof(RCC_TypeDef, AHB2ENSR)
#define ZO_RCC_AHB4ENSR       offsetof(RCC_TypeDef, AHB4ENSR)
#define ZO_RCC_AHB5ENSR       offsetof(RCC_TypeDef, AHB5ENSR)
#define ZO_RCC_APB2ENSR       offsetof(RCC_TypeDef, APB2ENSR)
#define ZO_RCC_AHB5RSTSR      offsetof(RCC_TypeDef, AHB5RSTSR)
#define ZO_RCC_AHB5RSTCR      offsetof(RCC_TypeDef, AHB5RSTCR)
#define ZO_RCC_GPIOEEN        RCC_AHB4ENR_GPIOEEN
#define ZO_RCC_GPIONEN        RCC_AHB4ENR_GPIONEN
#define ZO_RCC_PWREN          RCC_AHB4ENR_PWREN
#define ZO_RCC_USART1EN       RCC_APB2ENR_USART1EN
#define ZO_RCC_RAMCFGEN       RCC_AHB2ENR_RAMCFGEN
#define ZO_RCC_XSPI2EN        RCC_AHB5ENR_XSPI2EN
#define ZO_RCC_XSPIMEN        RCC_AHB5ENR_XSPIMEN
#define ZO_RCC_XSPI2RST       RCC_AHB5RSTR_XSPI2RST
#define ZO_RCC_AXISRAM3EN     RCC_MEMENR_AXISRAM3EN
#define ZO_RCC_AXISRAM4EN     RCC_MEMENR_AXISRAM4EN
#define ZO_RCC_AXISRAM5EN     RCC_MEMENR_AXISRAM5EN
#define ZO_RCC_AXISRAM6EN     RCC_MEMENR_AXISRAM6EN
#define ZO_RCC_CACHEAXIRAMEN  RCC_MEMENR_CACHEAXIRAMEN
#define ZO_RCC_USART1SEL_POS  RCC_CCIPR13_USART1SEL_Pos
#define ZO_RCC_XSPI2SEL_POS   RCC_CCIPR6_XSPI2SEL_Pos

#define ZO_RAMCFG_SRAMSD      RAMCFG_CR_SRAMSD

#define ZO_PWR_SVMCR3         offsetof(PWR_TypeDef, SVMCR3)
#define ZO_PWR_VDDIO3SV       PWR_SVMCR3_VDDIO3SV
#define ZO_PWR_VDDIO3VRSEL    PWR_SVMCR3_VDDIO3VRSEL

#define ZO_GPIO_MODER         offsetof(GPIO_TypeDef, MODER)
#define ZO_GPIO_OSPEEDR       offsetof(GPIO_TypeDef, OSPEEDR)
#define ZO_GPIO_PUPDR         offsetof(GPIO_TypeDef, PUPDR)
#define ZO_GPIO_AFRL          offsetof(GPIO_TypeDef, AFR[0])
#define ZO_GPIO_AFRH          offsetof(GPIO_TypeDef, AFR[1])

#define ZO_USART_CR1          offsetof(USART_TypeDef, CR1)
#define ZO_USART_CR2          offsetof(USART_TypeDef, CR2)
#define ZO_USART_CR3          offsetof(USART_TypeDef, CR3)
#define ZO_USART_BRR          offsetof(USART_TypeDef, BRR)
#define ZO_USART_ISR          offsetof(USART_TypeDef, ISR)
#define ZO_USART_ICR          offsetof(USART_TypeDef, ICR)
#define ZO_USART_RDR          offsetof(USART_TypeDef, RDR)
#define ZO_USART_TDR          offsetof(USART_TypeDef, TDR)
#define ZO_USART_PRESC        offsetof(USART_TypeDef, PRESC)
#define ZO_USART_CR1_UE       USART_CR1_UE
#define ZO_USART_CR1_RE       USART_CR1_RE
#define ZO_USART_CR1_TE       USART_CR1_TE
#define ZO_USART_CR1_RXFNEIE  USART_CR1_RXNEIE_RXFNEIE
#define ZO_USART_CR1_FIFOEN   USART_CR1_FIFOEN
#define ZO_USART_ISR_ORE      USART_ISR_ORE
#define ZO_USART_ISR_RXFNE    USART_ISR_RXNE_RXFNE
#define ZO_USART_ISR_TC       USART_ISR_TC
#define ZO_USART_ISR_TXFNF    USART_ISR_TXE_TXFNF
#define ZO_USART_ISR_TEACK    USART_ISR_TEACK
#define ZO_USART_ISR_REACK    USART_ISR_REACK
#define ZO_USART_ICR_ORECF    USART_ICR_ORECF
#define ZO_USART1_IRQ         ((uint32_t)USART1_IRQn)

#define ZO_XSPI_CR            offsetof(XSPI_TypeDef, CR)
#define ZO_XSPI_DCR1          offsetof(XSPI_TypeDef, DCR1)
#define ZO_XSPI_DCR2          offsetof(XSPI_TypeDef, DCR2)
#define ZO_XSPI_SR            offsetof(XSPI_TypeDef, SR)
#define ZO_XSPI_CCR           offsetof(XSPI_TypeDef, CCR)
#define ZO_XSPI_TCR           offsetof(XSPI_TypeDef, TCR)
#define ZO_XSPI_IR            offsetof(XSPI_TypeDef, IR)
#define ZO_XSPI_CR_EN         XSPI_CR_EN
#define ZO_XSPI_CR_ABORT      XSPI_CR_ABORT
#define ZO_XSPI_CR_FMODE_POS  XSPI_CR_FMODE_Pos
#define ZO_XSPI_DCR1_MTYP_POS XSPI_DCR1_MTYP_Pos
#define ZO_XSPI_DCR1_DEVSIZE_POS XSPI_DCR1_DEVSIZE_Pos
#define ZO_XSPI_DCR1_CSHT_POS XSPI_DCR1_CSHT_Pos
#define ZO_XSPI_DCR2_PRESCALER_POS XSPI_DCR2_PRESCALER_Pos
#define ZO_XSPI_CCR_IMODE_POS XSPI_CCR_IMODE_Pos
#define ZO_XSPI_CCR_ISIZE_POS XSPI_CCR_ISIZE_Pos
#define ZO_XSPI_CCR_ADMODE_POS XSPI_CCR_ADMODE_Pos
#define ZO_XSPI_CCR_ADSIZE_POS XSPI_CCR_ADSIZE_Pos
#define ZO_XSPI_CCR_DMODE_POS XSPI_CCR_DMODE_Pos
#define ZO_XSPI_TCR_DCYC_POS  XSPI_TCR_DCYC_Pos
#define ZO_XSPI_TCR_SSHIFT    XSPI_TCR_SSHIFT
#define ZO_XSPI_SR_BUSY       XSPI_SR_BUSY
/* --- checkpoint store: XSPI indirect mode (zo_port_stm32n6_nor.c) */
#define ZO_XSPI2_MEM_BASE     XSPI2_BASE
#define ZO_XSPI_FCR           offsetof(XSPI_TypeDef, FCR)
#define ZO_XSPI_DLR           offsetof(XSPI_TypeDef, DLR)
#define ZO_XSPI_AR            offsetof(XSPI_TypeDef, AR)
#define ZO_XSPI_DR            offsetof(XSPI_TypeDef, DR)
#define ZO_XSPI_SR_TEF        XSPI_SR_TEF
#define ZO_XSPI_SR_TCF        XSPI_SR_TCF
#define ZO_XSPI_SR_FTF        XSPI_SR_FTF
#define ZO_XSPI_FCR_CTEF      XSPI_FCR_CTEF
#define ZO_XSPI_FCR_CTCF      XSPI_FCR_CTCF
/* --- end checkpoint store */

/* --- NPU: the Neural-ART glue (runtime/npu/zo_neuralart.c) */
#define ZO_NPU_BASE           NPU_BASE_S
#define ZO_CACHEAXI_BASE      CACHEAXI_BASE_S
#define ZO_RIFSC_BASE         RIFSC_BASE_S
#define ZO_NPU0_IRQ           ((uint32_t)NPU0_IRQn)
#define ZO_RCC_AHB3ENR        offsetof(RCC_TypeDef, AHB3ENR)
#define ZO_RCC_AHB3ENSR       offsetof(RCC_TypeDef, AHB3ENSR)
#define ZO_RCC_NPUEN          RCC_AHB5ENR_NPUEN
#define ZO_RCC_CACHEAXIEN     RCC_AHB5ENR_CACHEAXIEN
#define ZO_RCC_NPURST         RCC_AHB5RSTR_NPURST
#define ZO_RCC_CACHEAXIRST    RCC_AHB5RSTR_CACHEAXIRST
#define ZO_RCC_RIFSCEN        RCC_AHB3ENR_RIFSCEN
#define ZO_CACHEAXI_CR1       offsetof(CACHEAXI_TypeDef, CR1)
#define ZO_CACHEAXI_CR1_EN    CACHEAXI_CR1_EN
#define ZO_RIFSC_RISC_SECCFGR0 offsetof(RIFSC_TypeDef, RISC_SECCFGRx[0])
#define ZO_RIFSC_RISC_PRIVCFGR0 offsetof(RIFSC_TypeDef, RISC_PRIVCFGRx[0])
#define ZO_RIFSC_RIMC_ATTR0   offsetof(RIFSC_TypeDef, RIMC_ATTRx[0])
#define ZO_RIFSC_RIMC_MCID_POS RIFSC_RIMC_ATTRx_MCID_Pos
#define ZO_RIFSC_RIMC_MSEC    RIFSC_RIMC_ATTRx_MSEC
#define ZO_RIFSC_RIMC_MPRIV   RIFSC_RIMC_ATTRx_MPRIV
/* --- end NPU */

#else /* the port's own numbers (equal to the header's: tests/test_n6_regs.py) */

/* Secure aliases; non-secure = minus 0x10000000. */
#define ZO_RCC_BASE           0x56028000u
#define ZO_PWR_BASE           0x56024800u
#define ZO_RAMCFG_BASE        0x52023000u
#define ZO_RAMCFG_STRIDE      0x80u /* one block of registers per SRAM: AXISRAM1 first */
#define ZO_GPIOE_BASE         0x56021000u /* GPIOA 0x56020000, one port every 0x400 */
#define ZO_GPION_BASE         0x56023400u
#define ZO_USART1_BASE        0x52001000u
#define ZO_XSPI2_BASE         0x5802A000u /* the XSPI2 registers (its memory window: 0x70000000) */

/* RCC: each enable register xxxENR has an atomic set register xxxENSR at +0x800, each reset
 * register xxxRSTR set/clear registers at +0x800/+0x1000. */
#define ZO_RCC_CCIPR6         0x158u
#define ZO_RCC_CCIPR13        0x174u
#define ZO_RCC_MEMENR         0x24Cu
#define ZO_RCC_AHB2ENR        0x254u
#define ZO_RCC_AHB4ENR        0x25Cu
#define ZO_RCC_AHB5ENR        0x260u
#define ZO_RCC_APB2ENR        0x26Cu
#define ZO_RCC_MEMENSR        0xA4Cu
#define ZO_RCC_AHB2ENSR       0xA54u
#define ZO_RCC_AHB4ENSR       0xA5Cu
#define ZO_RCC_AHB5ENSR       0xA60u
#define ZO_RCC_APB2ENSR       0xA6Cu
#define ZO_RCC_AHB5RSTSR      0xA20u
#define ZO_RCC_AHB5RSTCR      0x1220u
#define ZO_RCC_GPIOEEN        (1u << 4)  /* AHB4 */
#define ZO_RCC_GPIONEN        (1u << 13) /* AHB4 */
#define ZO_RCC_PWREN          (1u << 18) /* AHB4 */
#define ZO_RCC_USART1EN       (1u << 4)  /* APB2 */
#define ZO_RCC_RAMCFGEN       (1u << 12) /* AHB2 */
#define ZO_RCC_XSPI2EN        (1u << 12) /* AHB5 */
#define ZO_RCC_XSPIMEN        (1u << 13) /* AHB5: the XSPI IO manager */
#define ZO_RCC_XSPI2RST       (1u << 12) /* AHB5 reset */
#define ZO_RCC_AXISRAM3EN     (1u << 0)  /* MEMENR */
#define ZO_RCC_AXISRAM4EN     (1u << 1)
#define ZO_RCC_AXISRAM5EN     (1u << 2)
#define ZO_RCC_AXISRAM6EN     (1u << 3)
#define ZO_RCC_CACHEAXIRAMEN  (1u << 10)
#define ZO_RCC_USART1SEL_POS  0u  /* CCIPR13 bits 2:0 */
#define ZO_RCC_XSPI2SEL_POS   4u  /* CCIPR6 bits 5:4 */

#define ZO_RAMCFG_SRAMSD      (1u << 20) /* CR: the SRAM is shut down */

#define ZO_PWR_SVMCR3         0x3Cu
#define ZO_PWR_VDDIO3SV       (1u << 9)  /* VDDIO3 valid: its IOs out of isolation */
#define ZO_PWR_VDDIO3VRSEL    (1u << 26) /* VDDIO3 at 1.8 V */

#define ZO_GPIO_MODER         0x00u /* 2 bits per pin: 0b10 alternate function */
#define ZO_GPIO_OSPEEDR       0x08u /* 2 bits per pin */
#define ZO_GPIO_PUPDR         0x0Cu /* 2 bits per pin: 0b01 pull-up */
#define ZO_GPIO_AFRL          0x20u /* 4 bits per pin 0..7 */
#define ZO_GPIO_AFRH          0x24u /* 4 bits per pin 8..15 */

#define ZO_USART_CR1          0x00u
#define ZO_USART_CR2          0x04u
#define ZO_USART_CR3          0x08u
#define ZO_USART_BRR          0x0Cu
#define ZO_USART_ISR          0x1Cu
#define ZO_USART_ICR          0x20u
#define ZO_USART_RDR          0x24u
#define ZO_USART_TDR          0x28u
#define ZO_USART_PRESC        0x2Cu
#define ZO_USART_CR1_UE       (1u << 0)
#define ZO_USART_CR1_RE       (1u << 2)
#define ZO_USART_CR1_TE       (1u << 3)
#define ZO_USART_CR1_RXFNEIE  (1u << 5)  /* interrupt when the receive FIFO is not empty (or overrun) */
#define ZO_USART_CR1_FIFOEN   (1u << 29) /* 8-byte FIFOs */
#define ZO_USART_ISR_ORE      (1u << 3)
#define ZO_USART_ISR_RXFNE    (1u << 5)
#define ZO_USART_ISR_TC       (1u << 6)
#define ZO_USART_ISR_TXFNF    (1u << 7)
#define ZO_USART_ISR_TEACK    (1u << 21)
#define ZO_USART_ISR_REACK    (1u << 22)
#define ZO_USART_ICR_ORECF    (1u << 3)
#define ZO_USART1_IRQ         159u /* USART1 global interrupt */

#define ZO_XSPI_CR            0x000u
#define ZO_XSPI_DCR1          0x008u
#define ZO_XSPI_DCR2          0x00Cu
#define ZO_XSPI_SR            0x020u
#define ZO_XSPI_CCR           0x100u
#define ZO_XSPI_TCR           0x108u
#define ZO_XSPI_IR            0x110u
#define ZO_XSPI_CR_EN         (1u << 0)
#define ZO_XSPI_CR_ABORT      (1u << 1)
#define ZO_XSPI_CR_FMODE_POS  28u /* bits 29:28 functional mode: 0b11 memory-mapped */
#define ZO_XSPI_DCR1_MTYP_POS 24u /* bits 26:24 memory type */
#define ZO_XSPI_DCR1_DEVSIZE_POS 16u /* bits 20:16: the device holds 2^(DEVSIZE + 1) bytes */
#define ZO_XSPI_DCR1_CSHT_POS 8u  /* bits 13:8: chip select high time - 1, in clock cycles */
#define ZO_XSPI_DCR2_PRESCALER_POS 0u /* bits 7:0: the XSPI clock = kernel clock / (PRESCALER + 1) */
#define ZO_XSPI_CCR_IMODE_POS 0u  /* bits 2:0 instruction lines: 1 = one */
#define ZO_XSPI_CCR_ISIZE_POS 4u  /* bits 5:4 instruction size: 0 = 8 bits */
#define ZO_XSPI_CCR_ADMODE_POS 8u /* bits 10:8 address lines */
#define ZO_XSPI_CCR_ADSIZE_POS 12u /* bits 13:12 address size: 3 = 32 bits */
#define ZO_XSPI_CCR_DMODE_POS 24u /* bits 26:24 data lines */
#define ZO_XSPI_TCR_DCYC_POS  0u  /* bits 4:0 dummy cycles */
#define ZO_XSPI_TCR_SSHIFT    (1u << 30) /* sample the data half a clock cycle later */
#define ZO_XSPI_SR_BUSY       (1u << 5)
/* --- checkpoint store: XSPI indirect mode (zo_port_stm32n6_nor.c) */
#define ZO_XSPI2_MEM_BASE     0x70000000u /* XSPI2's memory window: NOR offset 0 in memory-mapped mode */
#define ZO_XSPI_FCR           0x024u /* flag clear */
#define ZO_XSPI_DLR           0x040u /* data length - 1 (indirect mode) */
#define ZO_XSPI_AR            0x048u /* address: writing it starts a command with an address and no data */
#define ZO_XSPI_DR            0x050u /* data: the FIFO, byte accesses */
#define ZO_XSPI_SR_TEF        (1u << 0) /* transfer error */
#define ZO_XSPI_SR_TCF        (1u << 1) /* transfer complete */
#define ZO_XSPI_SR_FTF        (1u << 2) /* FIFO threshold: room for a byte (write), a byte there (read) */
#define ZO_XSPI_FCR_CTEF      (1u << 0)
#define ZO_XSPI_FCR_CTCF      (1u << 1)
/* --- end checkpoint store */

/* --- NPU: the Neural-ART glue (runtime/npu/zo_neuralart.c) */
#define ZO_NPU_BASE           0x580E0000u
#define ZO_CACHEAXI_BASE      0x580DFC00u /* the NPU cache's registers */
#define ZO_RIFSC_BASE         0x54024000u
#define ZO_NPU0_IRQ           53u /* NPU0..3: 53..56; the NPU cache: 57 */
#define ZO_RCC_AHB3ENR        0x258u
#define ZO_RCC_AHB3ENSR       0xA58u
#define ZO_RCC_NPUEN          (1u << 31) /* AHB5 */
#define ZO_RCC_CACHEAXIEN     (1u << 30) /* AHB5 */
#define ZO_RCC_NPURST         (1u << 31) /* AHB5 reset */
#define ZO_RCC_CACHEAXIRST    (1u << 30) /* AHB5 reset */
#define ZO_RCC_RIFSCEN        (1u << 9)  /* AHB3 */
#define ZO_CACHEAXI_CR1       0x00u
#define ZO_CACHEAXI_CR1_EN    (1u << 0)
#define ZO_RIFSC_RISC_SECCFGR0 0x010u /* one bit per peripheral, 32 per register */
#define ZO_RIFSC_RISC_PRIVCFGR0 0x030u
#define ZO_RIFSC_RIMC_ATTR0   0xC10u /* one register per bus master */
#define ZO_RIFSC_RIMC_MCID_POS 4u /* bits 6:4 the master's compartment */
#define ZO_RIFSC_RIMC_MSEC    (1u << 8)
#define ZO_RIFSC_RIMC_MPRIV   (1u << 9)
/* --- end NPU */

#endif /* ZO_DEVICE_HEADERS */

/* --- NPU: RIF indices of the NPU, from ST's HAL (stm32n6xx_hal_rif.h: RIF_MASTER_INDEX_NPU,
 * RIF_RISC_PERIPH_INDEX_NPU), not in the device header: the port's own in both. */
#define ZO_RIF_MASTER_NPU      1u
#define ZO_RIF_PERIPH_NPU_REG  3u  /* RISC_SECCFGR3 / RISC_PRIVCFGR3 */
#define ZO_RIF_PERIPH_NPU_BIT  10u
/* --- end NPU */

/* A register field of `width` bits at `shift` set to `value`. */
static inline void zo_set_field(volatile uint32_t *reg, uint32_t shift, uint32_t width, uint32_t value)
{
    const uint32_t mask = ((1u << width) - 1u) << shift;
    *reg = (*reg & ~mask) | ((value << shift) & mask);
}

/* Flash boot: XSPI2 in memory-mapped mode (zo_port_stm32n6_xspi.c). */
void zo_stm32n6_xspi2_map(void);
/* Back to memory-mapped mode (the read command) after indirect commands: zo_port_stm32n6_nor.c. */
void zo_stm32n6_xspi2_memory_mapped(void);

#endif /* ZO_PORT_STM32N6_REGS_H */
