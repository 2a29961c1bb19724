/*
 * ni_vfio.h — how the register-level C examples (cm5_registers.c, lanai_packets.c,
 * t3e_mlink.c) reach the NI inside a guest without libni: find the PCI function, bind it to
 * vfio-pci, open it through the VFIO container/group API, enable it and map BAR0. Each
 * program then uses the registers its seed describes.
 */
#ifndef NI_VFIO_H
#define NI_VFIO_H

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/pci_regs.h>
#include <linux/vfio.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

/* The VFIO container ni_vfio_open set up (-1 before): programs that let the NI DMA into their
 * memory map it here with VFIO_IOMMU_MAP_DMA (t3e_mlink.c). */
static int ni_vfio_container = -1;

static int ni_vfio_read_hex(const char *path, unsigned *v)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ok = fscanf(f, "%x", v) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

static void ni_vfio_write_file(const char *path, const char *s)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(s, f);
        fclose(f); /* drivers_probe may refuse: what counts is the driver afterwards */
    }
}

/* The NI's PCI address: NI_PCI, or the first function with the vendor:device IDs given. */
static void ni_vfio_find(char *addr, size_t n, unsigned vendor_id, unsigned device_id,
                         void (*die)(const char *))
{
    const char *env = getenv("NI_PCI");
    if (env) {
        snprintf(addr, n, "%s", env);
        return;
    }
    DIR *d = opendir("/sys/bus/pci/devices");
    if (!d)
        die("opening /sys/bus/pci/devices");
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[512];
        unsigned vendor, device;
        snprintf(p, sizeof p, "/sys/bus/pci/devices/%s/vendor", e->d_name);
        if (ni_vfio_read_hex(p, &vendor))
            continue;
        snprintf(p, sizeof p, "/sys/bus/pci/devices/%s/device", e->d_name);
        if (ni_vfio_read_hex(p, &device))
            continue;
        if (vendor == vendor_id && device == device_id) {
            snprintf(addr, n, "%s", e->d_name);
            closedir(d);
            return;
        }
    }
    errno = 0;
    die("no PCI function with the NI's IDs (1234:4e49)");
}

/* Find the NI (its address into `addr`), bind it to vfio-pci, open it through the
 * container/group API; returns the VFIO device descriptor. `die` reports and exits. */
static int ni_vfio_open(char *addr, size_t n, unsigned vendor_id, unsigned device_id,
                        void (*die)(const char *))
{
    char p[512], link[512];
    ni_vfio_find(addr, n, vendor_id, device_id, die);
    snprintf(p, sizeof p, "/sys/bus/pci/devices/%s/driver", addr);
    ssize_t l = readlink(p, link, sizeof link - 1);
    if (l < 0 || strcmp(basename((link[l] = 0, link)), "vfio-pci") != 0) {
        snprintf(p, sizeof p, "/sys/bus/pci/devices/%s/driver_override", addr);
        ni_vfio_write_file(p, "vfio-pci");
        if (l >= 0) {
            snprintf(p, sizeof p, "/sys/bus/pci/devices/%s/driver/unbind", addr);
            ni_vfio_write_file(p, addr);
        }
        ni_vfio_write_file("/sys/bus/pci/drivers_probe", addr);
    }
    snprintf(p, sizeof p, "/sys/bus/pci/devices/%s/iommu_group", addr);
    l = readlink(p, link, sizeof link - 1);
    if (l < 0)
        die("the NI has no IOMMU group (boot with a vIOMMU and intel_iommu=on)");
    link[l] = 0;
    char group_path[600];
    snprintf(group_path, sizeof group_path, "/dev/vfio/%s", basename(link));

    int container = open("/dev/vfio/vfio", O_RDWR);
    if (container < 0)
        die("opening /dev/vfio/vfio");
    if (ioctl(container, VFIO_GET_API_VERSION) != VFIO_API_VERSION)
        die("unknown VFIO API version");
    int group = open(group_path, O_RDWR);
    if (group < 0)
        die("opening the NI's VFIO group (is it bound to vfio-pci?)");
    struct vfio_group_status status = {.argsz = sizeof status};
    if (ioctl(group, VFIO_GROUP_GET_STATUS, &status) || !(status.flags & VFIO_GROUP_FLAGS_VIABLE))
        die("the VFIO group is not viable");
    if (ioctl(group, VFIO_GROUP_SET_CONTAINER, &container))
        die("VFIO_GROUP_SET_CONTAINER");
    if (ioctl(container, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU) &&
        ioctl(container, VFIO_SET_IOMMU, VFIO_TYPE1_IOMMU))
        die("VFIO_SET_IOMMU");
    int dev = ioctl(group, VFIO_GROUP_GET_DEVICE_FD, addr);
    if (dev < 0)
        die("VFIO_GROUP_GET_DEVICE_FD");
    ni_vfio_container = container;
    return dev;
}

/* Turn on Memory Space (so the BARs decode) and Bus Master (the NI writes into this program's
 * memory; vfio-pci leaves it off). Config space is little-endian. */
static inline void ni_vfio_enable(int dev, void (*die)(const char *))
{
    struct vfio_region_info cfg = {.argsz = sizeof cfg, .index = VFIO_PCI_CONFIG_REGION_INDEX};
    if (ioctl(dev, VFIO_DEVICE_GET_REGION_INFO, &cfg))
        die("VFIO_DEVICE_GET_REGION_INFO (config space)");
    uint16_t cmd;
    if (pread(dev, &cmd, 2, (off_t)(cfg.offset + PCI_COMMAND)) != 2)
        die("reading the PCI command register");
    cmd = htole16(le16toh(cmd) | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER);
    if (pwrite(dev, &cmd, 2, (off_t)(cfg.offset + PCI_COMMAND)) != 2)
        die("enabling memory space and bus mastering");
}

/* Map the first `size` bytes of BAR0, which must hold at least `need` bytes (`what` says
 * what would be missing) and be mmappable. */
static inline volatile uint8_t *ni_vfio_map_bar0(int dev, uint64_t size, uint64_t need,
                                                 const char *what, void (*die)(const char *))
{
    struct vfio_region_info info = {.argsz = sizeof info, .index = VFIO_PCI_BAR0_REGION_INDEX};
    if (ioctl(dev, VFIO_DEVICE_GET_REGION_INFO, &info))
        die("VFIO_DEVICE_GET_REGION_INFO (BAR0)");
    if (info.size < size || info.size < need) {
        errno = 0;
        die(what);
    }
    if (!(info.flags & VFIO_REGION_INFO_FLAG_MMAP)) {
        errno = 0;
        die("BAR0 cannot be mmapped");
    }
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, dev, (off_t)info.offset);
    if (m == MAP_FAILED)
        die("mmap of BAR0");
    return m;
}

#endif /* NI_VFIO_H */
