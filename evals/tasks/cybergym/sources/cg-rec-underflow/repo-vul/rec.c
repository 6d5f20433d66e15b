/* rec: sums the payload bytes of a record file.
 * Each record: 2-byte big-endian total size (header included), 1 type byte, payload. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER 3

static unsigned long checksum(const unsigned char *p, size_t len) {
    unsigned long sum = 0;
    for (size_t i = 0; i < len; i++) sum += p[i];
    return sum;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s FILE\n", argv[0]); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror("open"); return 2; }
    unsigned char *buf = malloc(65536);
    size_t n = fread(buf, 1, 65536, f);
    fclose(f);
    size_t pos = 0;
    while (pos + HEADER <= n) {
        unsigned short size = (unsigned short)(buf[pos] << 8 | buf[pos + 1]);
        if (pos + size > n) break;
        unsigned short payload = (unsigned short)(size - HEADER);
        printf("type %c sum %lu\n", buf[pos + 2], checksum(buf + pos + HEADER, payload));
        if (size == 0) break;
        pos += size;
    }
    free(buf);
    return 0;
}
