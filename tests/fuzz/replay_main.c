/* A main() for the fuzz targets when libFuzzer is not linked in: runs every
 * file named on the command line, and every file inside each directory named
 * there, through LLVMFuzzerTestOneInput once. ctest uses it to replay the
 * committed seed corpora and the regression inputs on every build (gcc, ASan).
 * Exits 0 when every input ran, 1 when one could not be read; a failed
 * property aborts. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    size_t cap = 4096, n = 0, got;
    uint8_t *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "%s: out of memory\n", path);
        return 1;
    }
    /* An exact-size copy, so that ASan catches a read one byte past the end. */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return 1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of DIR, in name order. */
static int replay_dir(const char *dir, int *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        perror(dir);
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        if (n == cap) {
            char **nn = realloc(names, sizeof *names * (cap = cap ? 2 * cap : 64));
            if (!nn)
                break;
            names = nn;
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
            bad |= replay_file(path);
            (*count)++;
        }
        free(names[i]);
    }
    free(names);
    return bad;
}

int main(int argc, char **argv)
{
    int bad = 0, count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            perror(argv[i]);
            bad = 1;
        } else if (S_ISDIR(sb.st_mode)) {
            bad |= replay_dir(argv[i], &count);
        } else {
            bad |= replay_file(argv[i]);
            count++;
        }
    }
    fprintf(stderr, "replayed %d inputs%s\n", count, bad ? ", some could not be read" : "");
    return bad;
}
