/* zo_port_stm32n6_xspi.c - flash boot on the STM32N657: XSPI2 in memory-mapped mode, so that
 * the weights and data the memory plan left in the external NOR (region XSPI2_NOR, switch XSPI2
 * of __zo_enable_memories) are read in place at 0x70100000.
 *
 * NOT VERIFIED ON HARDWARE: no STM32N6 board was available; it builds warning-free, and its
 * register addresses and bit positions agree with ST's stm32n657xx.h (zo_port_stm32n6_regs.h,
 * tests/test_n6_regs.py).  The field values, the pins and the flash command are from the
 * reference manual (RM0486, XSPI), the boards' documentation and the flashes' data sheets, and
 * are marked (verify) where a board is needed to confirm them.
 *
 * The NOR: Macronix MX66UW1G45G (STM32N6570-DK, 128 MiB) or MX25UM51245G (NUCLEO-N657X0-Q,
 * 64 MiB), octal flashes at 1.8 V on the VDDIO3 supply, on XSPI2 through port 2 of the XSPI IO
 * manager (GPIO port N).  After power-on both are in 1-line SPI mode, and both take the 1-line
 * "fast read with 4-byte address" (0x0C, 8 dummy cycles) there without any setting of their own:
 * slower than octal DTR (1 bit per clock instead of 16), but it writes nothing to the flash, so
 * it cannot leave the flash in a mode the boot ROM does not expect.  (verify) that the boot ROM
 * leaves the flash in SPI mode after copying the FSBL image.
 *
 * XSPI2 is reset first (RCC), whatever the boot ROM left configured, and clocked by HCLK5 (its
 * kernel clock at reset) divided by 4: at most 100 MHz even at the highest bus clock, within the
 * flashes' SPI fast-read limit.  Called from the reset code before .data and .bss are touched;
 * it uses no RAM data.
 */
#include <stdint.h>

#include "zo_port_cortex_m.h"
#include "zo_port_stm32n6_regs.h"

#define RCC_REG(off)   ZO_REG32(ZO_RCC_BASE + (off))
#define PWR_REG(off)   ZO_REG32(ZO_PWR_BASE + (off))
#define GPION_REG(off) ZO_REG32(ZO_GPION_BASE + (off))
#define XSPI2_REG(off) ZO_REG32(ZO_XSPI2_BASE + (off))

/* XSPI field values (RM0486, XSPI registers). */
#define MTYP_STANDARD       2u  /* DCR1 MTYP 0b010: standard (SPI) mode */
#define DEVSIZE_128MIB      26u /* 2^(26 + 1) bytes: the DK's NOR; the NUCLEO's 64 MiB part is never read past its size (its board region is 64 MiB) */
#define CSHT_CYCLES         4u  /* chip select high between commands: >= the flashes' tSHSL at 100 MHz */
#define PRESCALER_DIV4      3u  /* the XSPI clock = kernel clock / (3 + 1) */
#define LINES_ONE           1u  /* CCR IMODE / ADMODE / DMODE: one line */
#define ADSIZE_32BIT        3u
#define FMODE_MEMORY_MAPPED 3u
#define XSPI2SEL_HCLK5      0u  /* RCC CCIPR6 XSPI2SEL (its reset value) */

/* The flash command (MX66UW1G45G, MX25UM51245G data sheets: FAST_READ4B). */
#define NOR_FAST_READ_4B    0x0Cu
#define NOR_DUMMY_CYCLES    8u

/* XSPI IO manager port 2 on GPIO port N, alternate function 9 (verify: the data sheet's AF
 * table): NCS PN1, IO0 PN2, IO1 PN3, CLK PN6; 1-line SPI needs no other pin. */
#define AF_XSPIM_P2 9u
static const uint8_t nor_pins[] = {1u, 2u, 3u, 6u};

void zo_stm32n6_xspi2_map(void)
{
    /* the NOR's IOs are on VDDIO3 (1.8 V on both boards): out of isolation */
    RCC_REG(ZO_RCC_AHB4ENSR) = ZO_RCC_PWREN | ZO_RCC_GPIONEN;
    (void)RCC_REG(ZO_RCC_AHB4ENR); /* read back: the clocks are on before the first access */
    PWR_REG(ZO_PWR_SVMCR3) |= ZO_PWR_VDDIO3VRSEL | ZO_PWR_VDDIO3SV;

    /* XSPI2 and the IO manager clocked, XSPI2 from its reset state */
    zo_set_field(&RCC_REG(ZO_RCC_CCIPR6), ZO_RCC_XSPI2SEL_POS, 2u, XSPI2SEL_HCLK5);
    RCC_REG(ZO_RCC_AHB5ENSR) = ZO_RCC_XSPI2EN | ZO_RCC_XSPIMEN;
    (void)RCC_REG(ZO_RCC_AHB5ENR);
    RCC_REG(ZO_RCC_AHB5RSTSR) = ZO_RCC_XSPI2RST;
    RCC_REG(ZO_RCC_AHB5RSTCR) = ZO_RCC_XSPI2RST;

    for (uint32_t i = 0; i < sizeof(nor_pins); ++i) {
        const uint32_t pin = nor_pins[i];
        volatile uint32_t *afr = pin < 8u ? &GPION_REG(ZO_GPIO_AFRL) : &GPION_REG(ZO_GPIO_AFRH);
        zo_set_field(afr, 4u * (pin % 8u), 4u, AF_XSPIM_P2);
        zo_set_field(&GPION_REG(ZO_GPIO_OSPEEDR), 2u * pin, 2u, 3u); /* very high speed */
        zo_set_field(&GPION_REG(ZO_GPIO_PUPDR), 2u * pin, 2u, 0u);
        zo_set_field(&GPION_REG(ZO_GPIO_MODER), 2u * pin, 2u, 2u);   /* alternate function */
    }

    /* the device, then (zo_stm32n6_xspi2_memory_mapped) the read command memory-mapped reads
     * issue; the registers are written while XSPI2 is disabled and not busy */
    while (XSPI2_REG(ZO_XSPI_SR) & ZO_XSPI_SR_BUSY) {
    }
    XSPI2_REG(ZO_XSPI_DCR1) = (MTYP_STANDARD << ZO_XSPI_DCR1_MTYP_POS) | (DEVSIZE_128MIB << ZO_XSPI_DCR1_DEVSIZE_POS) |
                          ((CSHT_CYCLES - 1u) << ZO_XSPI_DCR1_CSHT_POS);
    XSPI2_REG(ZO_XSPI_DCR2) = PRESCALER_DIV4 << ZO_XSPI_DCR2_PRESCALER_POS;
    zo_stm32n6_xspi2_memory_mapped();
}

void zo_stm32n6_xspi2_memory_mapped(void)
{
    while (XSPI2_REG(ZO_XSPI_SR) & ZO_XSPI_SR_BUSY) {
    }
    XSPI2_REG(ZO_XSPI_CR) = FMODE_MEMORY_MAPPED << ZO_XSPI_CR_FMODE_POS;
    XSPI2_REG(ZO_XSPI_CCR) = (LINES_ONE << ZO_XSPI_CCR_IMODE_POS) | (0u << ZO_XSPI_CCR_ISIZE_POS) |
                         (LINES_ONE << ZO_XSPI_CCR_ADMODE_POS) | (ADSIZE_32BIT << ZO_XSPI_CCR_ADSIZE_POS) |
                         (LINES_ONE << ZO_XSPI_CCR_DMODE_POS);
    /* single data rate: the flash drives data on the falling edge; sampling half a cycle later
     * leaves margin for its output delay and the board's traces (verify) */
    XSPI2_REG(ZO_XSPI_TCR) = ZO_XSPI_TCR_SSHIFT | (NOR_DUMMY_CYCLES << ZO_XSPI_TCR_DCYC_POS);
    XSPI2_REG(ZO_XSPI_IR) = NOR_FAST_READ_4B;
    XSPI2_REG(ZO_XSPI_CR) = (FMODE_MEMORY_MAPPED << ZO_XSPI_CR_FMODE_POS) | ZO_XSPI_CR_EN;
    __asm volatile("dsb\n\tisb" ::: "memory");
}
