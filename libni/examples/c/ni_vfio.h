/*
 * ni_vfio.h — how the register-level C examples (cm5_registers.c, lanai_packets.c,
 * t3e_mlink.c) reach the NI inside a guest without libni: find the PCI function, bind it to
 * vfio-pci, and open it through the VFIO container/group API. Each program then maps the BAR
 * its seed describes.
 */
#ifndef NI_VFIO_H
#define NI_VFIO_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/vfio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
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

#endif /* NI_VFIO_H */
