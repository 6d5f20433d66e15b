/* img: loads a tiny grayscale image and prints its mean brightness.
 * Format: "IMG1", width (1 byte), height (1 byte), data length (2 bytes, little endian), data. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct image { unsigned width, height; unsigned char *pixels; };

static int load(const unsigned char *buf, size_t n, struct image *img) {
    if (n < 8 || memcmp(buf, "IMG1", 4) != 0) return -1;
    img->width = buf[4];
    img->height = buf[5];
    size_t data_len = (size_t)buf[6] | ((size_t)buf[7] << 8);
    if (8 + data_len > n) return -1;
    img->pixels = malloc((size_t)img->width * img->height + 1);
    if (!img->pixels) return -1;
    memcpy(img->pixels, buf + 8, data_len);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s FILE\n", argv[0]); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror("open"); return 2; }
    static unsigned char buf[70000];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    struct image img;
    if (load(buf, n, &img) != 0) { fprintf(stderr, "bad image\n"); return 0; }
    unsigned long sum = 0;
    for (unsigned i = 0; i < img.width * img.height; i++) sum += img.pixels[i];
    printf("%ux%u mean=%lu\n", img.width, img.height, img.width * img.height ? sum / (img.width * img.height) : 0);
    free(img.pixels);
    return 0;
}
