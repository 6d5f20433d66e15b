/* tlv: prints the records of a tag-length-value file.
 * Format: "TLV" magic, then records of 1 tag byte, 1 length byte and `length` value bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN 8

static void print_record(unsigned char tag, const unsigned char *value, size_t len) {
    char name[NAME_MAX_LEN];
    if (tag == 'N') {
        memcpy(name, value, len);
        printf("name record: %.*s\n", (int)(len < NAME_MAX_LEN ? len : NAME_MAX_LEN), name);
    } else {
        printf("record tag=%c len=%zu\n", tag, len);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s FILE\n", argv[0]); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror("open"); return 2; }
    static unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (n < 3 || memcmp(buf, "TLV", 3) != 0) { fprintf(stderr, "not a TLV file\n"); return 0; }
    size_t pos = 3;
    while (pos + 2 <= n) {
        unsigned char tag = buf[pos], len = buf[pos + 1];
        pos += 2;
        if (pos + len > n) { fprintf(stderr, "truncated record\n"); return 0; }
        print_record(tag, buf + pos, len);
        pos += len;
    }
    return 0;
}
