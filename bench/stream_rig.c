/* The paced upstream and the measuring client of bench/streams.py, in C: the Python rig
 * (bench/upstream.py and streams.py's asyncio client) spent its core before the proxies
 * spent theirs (at 1,000 streams the direct run waited 1.4 s for first chunks and saw 54 ms
 * gaps in streams paced at 20), so it measured itself. This one relays 50,000 chunks a
 * second in a few percent of a core. bench/streams.py compiles it with the machine's C
 * compiler (`--rig c`, the default where one is installed); nothing of the gateway's
 * imports or ships it.
 *
 *   stream_rig upstream PORT CHUNKS INTERVAL_MS
 *     Answers every POST with the chat-completions SSE stream bench/upstream.py writes
 *     (chunked encoding; CHUNKS content events INTERVAL_MS apart, the first at once, then
 *     the stop event, the usage event when the request asked for it, and [DONE]); any
 *     other method gets "ok" (the harness's health check). Keep-alive, as the gateway's
 *     pool expects.
 *
 *   stream_rig client PORT STREAMS RAMP_S STALL_MS REQUEST_FILE
 *     Opens STREAMS connections RAMP_S seconds apart in all, sends the request in
 *     REQUEST_FILE on each, and notes when each read brings SSE events (as streams.py's
 *     Python client does: the gaps between a stream's reads that carry events). Prints
 *     "open N" every 100 ms while it runs, then one line of JSON with the results.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *what) {
    perror(what);
    exit(2);
}

/* ---------------------------------------------------------------- upstream */

static const char CHUNK[] =
    "data: {\"id\": \"chatcmpl-bench\", \"object\": \"chat.completion.chunk\", \"created\": "
    "1700000000, \"model\": \"bench-model\", \"choices\": [{\"index\": 0, \"delta\": "
    "{\"content\": \"word \"}, \"finish_reason\": null, \"logprobs\": null}]}\n\n";
static const char STOP[] =
    "data: {\"id\": \"chatcmpl-bench\", \"object\": \"chat.completion.chunk\", \"created\": "
    "1700000000, \"model\": \"bench-model\", \"choices\": [{\"index\": 0, \"delta\": {}, "
    "\"finish_reason\": \"stop\", \"logprobs\": null}]}\n\n";
static const char USAGE_FMT[] =
    "data: {\"id\": \"chatcmpl-bench\", \"object\": \"chat.completion.chunk\", \"created\": "
    "1700000000, \"model\": \"bench-model\", \"choices\": [], \"usage\": {\"prompt_tokens\": "
    "500, \"completion_tokens\": %d, \"total_tokens\": %d}}\n\n";
static const char DONE[] = "data: [DONE]\n\n";
static const char STREAM_HEAD[] =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
static const char OK_REPLY[] = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

typedef struct {
    int fd;
    unsigned generation; /* a closed connection's queued sends are skipped */
    char *in;
    size_t in_len, in_cap;
    char *out; /* what the socket did not take yet */
    size_t out_len, out_cap;
    int streaming, sent, usage, want_out;
} Upstream;

typedef struct {
    double due;
    int fd;
    unsigned generation;
} Due;

static Upstream *ups;
static Due *queue;
static size_t queue_head, queue_len, queue_cap;
static int chunks_per_stream;
static double interval_s;
static int up_epoll;

static void append(char **buf, size_t *len, size_t *cap, const char *data, size_t n) {
    if (*len + n > *cap) {
        *cap = (*len + n) * 2 + 256;
        *buf = realloc(*buf, *cap);
        if (!*buf) die("realloc");
    }
    memcpy(*buf + *len, data, n);
    *len += n;
}

static void up_close(Upstream *u) {
    if (u->fd < 0) return;
    close(u->fd);
    u->fd = -1;
    u->generation++;
    u->in_len = u->out_len = 0;
    u->streaming = 0;
}

static void up_flush(Upstream *u) {
    while (u->out_len) {
        ssize_t n = write(u->fd, u->out, u->out_len);
        if (n < 0) {
            if (errno == EAGAIN) {
                if (!u->want_out) {
                    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.fd = u->fd};
                    epoll_ctl(up_epoll, EPOLL_CTL_MOD, u->fd, &ev);
                    u->want_out = 1;
                }
                return;
            }
            up_close(u);
            return;
        }
        memmove(u->out, u->out + n, u->out_len - (size_t)n);
        u->out_len -= (size_t)n;
    }
    if (u->want_out) {
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = u->fd};
        epoll_ctl(up_epoll, EPOLL_CTL_MOD, u->fd, &ev);
        u->want_out = 0;
    }
}

static void up_send(Upstream *u, const char *data, size_t n) {
    append(&u->out, &u->out_len, &u->out_cap, data, n);
    if (u->out_len == n) up_flush(u); /* nothing was waiting: write now */
}

static void up_send_chunk(Upstream *u, const char *data, size_t n) {
    char frame[8192];
    int head = snprintf(frame, sizeof frame, "%zx\r\n", n);
    memcpy(frame + head, data, n);
    memcpy(frame + head + n, "\r\n", 2);
    up_send(u, frame, (size_t)head + n + 2);
}

static void schedule(Upstream *u, double due) {
    if (queue_head + queue_len == queue_cap) {
        if (queue_head) {
            memmove(queue, queue + queue_head, queue_len * sizeof *queue);
            queue_head = 0;
        } else {
            queue_cap = queue_cap * 2 + 1024;
            queue = realloc(queue, queue_cap * sizeof *queue);
            if (!queue) die("realloc");
        }
    }
    /* every interval is the same, so dues arrive in order: the queue stays sorted */
    queue[queue_head + queue_len++] = (Due){due, u->fd, u->generation};
}

/* one step of a stream: a content event, or after the last one the tail */
static void up_step(Upstream *u, double due) {
    if (u->sent < chunks_per_stream) {
        up_send_chunk(u, CHUNK, sizeof CHUNK - 1);
        u->sent++;
        if (u->fd >= 0) schedule(u, due + interval_s);
        return;
    }
    char tail[4096];
    size_t n = 0;
    memcpy(tail, STOP, sizeof STOP - 1);
    n += sizeof STOP - 1;
    if (u->usage)
        n += (size_t)snprintf(tail + n, sizeof tail - n, USAGE_FMT, chunks_per_stream,
                              500 + chunks_per_stream);
    memcpy(tail + n, DONE, sizeof DONE - 1);
    n += sizeof DONE - 1;
    up_send_chunk(u, tail, n);
    if (u->fd >= 0) up_send(u, "0\r\n\r\n", 5);
    u->streaming = 0;
}

/* a whole request in u->in: answer it, keep what follows */
static void up_request(Upstream *u) {
    while (!u->streaming && u->fd >= 0) {
        char *end = memmem(u->in, u->in_len, "\r\n\r\n", 4);
        if (!end) return;
        size_t head_len = (size_t)(end - u->in) + 4, body_len = 0;
        for (char *line = u->in; line < end;) {
            char *eol = memmem(line, (size_t)(end + 2 - line), "\r\n", 2);
            if ((size_t)(eol - line) > 15 && strncasecmp(line, "content-length:", 15) == 0)
                body_len = (size_t)atol(line + 15);
            line = eol + 2;
        }
        if (u->in_len < head_len + body_len) return;
        int post = memcmp(u->in, "POST", 4) == 0;
        u->usage = memmem(u->in + head_len, body_len, "include_usage", 13) != NULL;
        memmove(u->in, u->in + head_len + body_len, u->in_len - head_len - body_len);
        u->in_len -= head_len + body_len;
        if (!post) {
            up_send(u, OK_REPLY, sizeof OK_REPLY - 1);
            continue;
        }
        up_send(u, STREAM_HEAD, sizeof STREAM_HEAD - 1);
        u->streaming = 1;
        u->sent = 0;
        if (u->fd >= 0) up_step(u, now_s());
    }
}

static int listen_on(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&at, sizeof at) || listen(fd, 4096)) die("listen");
    return fd;
}

static int run_upstream(int port, int chunks, double interval_ms) {
    chunks_per_stream = chunks;
    interval_s = interval_ms / 1000;
    int listener = listen_on(port), max_fd = 1 << 16;
    ups = calloc((size_t)max_fd, sizeof *ups);
    up_epoll = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = listener}, events[512];
    epoll_ctl(up_epoll, EPOLL_CTL_ADD, listener, &ev);
    for (;;) {
        int timeout = -1;
        if (queue_len) {
            double wait = queue[queue_head].due - now_s();
            timeout = wait <= 0 ? 0 : (int)(wait * 1000) + 1;
        }
        int n = epoll_wait(up_epoll, events, 512, timeout);
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == listener) {
                int client;
                while ((client = accept4(listener, 0, 0, SOCK_NONBLOCK)) >= 0) {
                    if (client >= max_fd) {
                        close(client);
                        continue;
                    }
                    int one = 1;
                    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    Upstream *u = &ups[client];
                    u->fd = client;
                    u->in_len = u->out_len = 0;
                    u->streaming = u->want_out = 0;
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = client};
                    epoll_ctl(up_epoll, EPOLL_CTL_ADD, client, &cev);
                }
                continue;
            }
            Upstream *u = &ups[fd];
            if (events[i].events & EPOLLOUT) up_flush(u);
            if (u->fd < 0 || !(events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
            char buf[65536];
            ssize_t got = read(fd, buf, sizeof buf);
            if (got <= 0) {
                if (got < 0 && errno == EAGAIN) continue;
                up_close(u);
                continue;
            }
            append(&u->in, &u->in_len, &u->in_cap, buf, (size_t)got);
            up_request(u);
        }
        double now = now_s();
        while (queue_len && queue[queue_head].due <= now) {
            Due due = queue[queue_head++];
            queue_len--;
            Upstream *u = &ups[due.fd];
            if (u->fd != due.fd || u->generation != due.generation || !u->streaming) continue;
            up_step(u, due.due);
            if (!u->streaming) up_request(u); /* a request that came in meanwhile */
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- client */

typedef struct {
    int fd, headed, finished, ok, events;
    double sent_at, last, max_gap;
    char head[4096];
    size_t head_len;
    char tail[64];
    size_t tail_len;
} Stream;

static double *gaps, *gap_ends, *firsts; /* gap_ends: when each gap ended, from the start */
static size_t gaps_len, gaps_cap, firsts_len;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *values, size_t n, double q) {
    if (!n) return -1;
    size_t i = (size_t)(q / 100 * (double)(n - 1) + 0.5);
    return values[i < n ? i : n - 1];
}

static size_t count_events(const char *data, size_t n) {
    size_t events = 0;
    for (const char *p = data; (p = memmem(p, n - (size_t)(p - data), "data: ", 6)); p += 6)
        events++;
    return events;
}

/* when the first stream finished, from the start: the streams are all open only before */
static double first_done = -1, started_at;

static void finish(Stream *s, int ok, int *open_now, int epoll) {
    if (s->finished) return;
    if (first_done < 0) first_done = now_s() - started_at;
    s->finished = 1;
    s->ok = ok;
    (*open_now)--;
    epoll_ctl(epoll, EPOLL_CTL_DEL, s->fd, 0);
    close(s->fd);
}

static void on_data(Stream *s, char *data, size_t n, double now, double start, double *all_open,
                    int *open_now, int epoll) {
    if (!s->headed) {
        size_t take = n < sizeof s->head - s->head_len ? n : sizeof s->head - s->head_len;
        memcpy(s->head + s->head_len, data, take);
        s->head_len += take;
        char *end = memmem(s->head, s->head_len, "\r\n\r\n", 4);
        if (!end) return;
        if (s->head_len < 12 || memcmp(s->head + 9, "200", 3) != 0) {
            finish(s, 0, open_now, epoll);
            return;
        }
        s->headed = 1;
        if (now - start > *all_open) *all_open = now - start;
        size_t used = (size_t)(end + 4 - s->head) - (s->head_len - take);
        data += used;
        n -= used;
    }
    size_t events = count_events(data, n);
    if (events) {
        if (s->last == 0) {
            firsts[firsts_len++] = now - s->sent_at;
        } else {
            double gap = now - s->last;
            if (gaps_len == gaps_cap) {
                gaps_cap = gaps_cap * 2 + 65536;
                gaps = realloc(gaps, gaps_cap * sizeof *gaps);
                gap_ends = realloc(gap_ends, gaps_cap * sizeof *gap_ends);
                if (!gaps || !gap_ends) die("realloc");
            }
            gap_ends[gaps_len] = now - start;
            gaps[gaps_len++] = gap;
            if (gap > s->max_gap) s->max_gap = gap;
        }
        s->last = now;
        s->events += (int)events;
    }
    /* the last 64 bytes seen, for the end of the stream */
    char joined[64 + 65536];
    memcpy(joined, s->tail, s->tail_len);
    size_t keep = n < 65536 ? n : 65536;
    memcpy(joined + s->tail_len, data + n - keep, keep);
    size_t total = s->tail_len + keep, from = total > 64 ? total - 64 : 0;
    memcpy(s->tail, joined + from, total - from);
    s->tail_len = total - from;
    if (memmem(s->tail, s->tail_len, "data: [DONE]", 12) && s->tail_len >= 5 &&
        memcmp(s->tail + s->tail_len - 5, "0\r\n\r\n", 5) == 0)
        finish(s, 1, open_now, epoll);
}

static int run_client(int port, int streams, double ramp, double stall_ms, const char *file) {
    FILE *f = fopen(file, "rb");
    if (!f) die(file);
    static char request[65536];
    size_t request_len = fread(request, 1, sizeof request, f);
    fclose(f);
    Stream *all = calloc((size_t)streams, sizeof *all);
    firsts = calloc((size_t)streams, sizeof *firsts);
    int epoll = epoll_create1(0), opened = 0, open_now = 0, done = 0;
    struct epoll_event events[512];
    double start = now_s(), all_open = 0, next_report = start;
    started_at = start;
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    while (done < streams) {
        double now = now_s();
        while (opened < streams && now - start >= ramp * opened / streams) {
            Stream *s = &all[opened];
            s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
            int one = 1;
            setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            open_now++;
            if (s->fd < 0 ||
                (connect(s->fd, (struct sockaddr *)&at, sizeof at) && errno != EINPROGRESS)) {
                s->finished = 1;
                open_now--;
                done++;
            } else {
                struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = (unsigned)opened};
                epoll_ctl(epoll, EPOLL_CTL_ADD, s->fd, &ev);
            }
            opened++;
        }
        if (now >= next_report) {
            printf("open %d\n", open_now);
            fflush(stdout);
            next_report = now + 0.1;
        }
        int timeout = opened < streams ? 1 : 100;
        int n = epoll_wait(epoll, events, 512, timeout);
        now = now_s();
        for (int i = 0; i < n; i++) {
            Stream *s = &all[events[i].data.u32];
            if (s->finished) continue;
            if (!s->sent_at) {
                int error = 0;
                socklen_t len = sizeof error;
                getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &error, &len);
                if (error || write(s->fd, request, request_len) != (ssize_t)request_len) {
                    finish(s, 0, &open_now, epoll);
                    done++;
                    continue;
                }
                s->sent_at = now;
                struct epoll_event ev = {.events = EPOLLIN, .data.u32 = events[i].data.u32};
                epoll_ctl(epoll, EPOLL_CTL_MOD, s->fd, &ev);
                continue;
            }
            char buf[65536];
            ssize_t got = read(s->fd, buf, sizeof buf);
            if (got < 0 && errno == EAGAIN) continue;
            if (got <= 0) {
                finish(s, 0, &open_now, epoll);
            } else {
                on_data(s, buf, (size_t)got, now, start, &all_open, &open_now, epoll);
            }
            if (s->finished) done++;
        }
    }
    double elapsed = now_s() - start, worst = 0;
    int finished = 0, failed = 0, stalled = 0;
    long chunks = 0;
    for (int i = 0; i < streams; i++) {
        Stream *s = &all[i];
        chunks += s->events;
        finished += s->ok;
        failed += !s->ok;
        stalled += !s->ok || s->max_gap * 1000 > stall_ms;
        if (s->max_gap > worst) worst = s->max_gap;
    }
    /* the gaps that ended while every stream was open: after the last one's head came and
       before the first one finished (none, where the first finished before the last
       opened) */
    size_t open_len = 0;
    for (size_t i = 0; i < gaps_len; i++)
        if (gap_ends[i] >= all_open && gap_ends[i] <= first_done) gap_ends[open_len++] = gaps[i];
    qsort(gap_ends, open_len, sizeof *gap_ends, cmp_double);
    qsort(gaps, gaps_len, sizeof *gaps, cmp_double);
    qsort(firsts, firsts_len, sizeof *firsts, cmp_double);
    printf("{\"finished\": %d, \"failed\": %d, \"stalled\": %d, \"chunks\": %ld, "
           "\"gap_p50\": %.6f, \"gap_p99\": %.6f, \"gap_p999\": %.6f, \"worst_gap\": %.6f, "
           "\"first_p50\": %.6f, \"first_p99\": %.6f, \"elapsed\": %.3f, \"all_open_at\": %.3f, "
           "\"open_gap_p99\": %.6f}\n",
           finished, failed, stalled, chunks, pct(gaps, gaps_len, 50), pct(gaps, gaps_len, 99),
           pct(gaps, gaps_len, 99.9), worst, pct(firsts, firsts_len, 50),
           pct(firsts, firsts_len, 99), elapsed, all_open, pct(gap_ends, open_len, 99));
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "upstream") == 0)
        return run_upstream(atoi(argv[2]), atoi(argv[3]), atof(argv[4]));
    if (argc == 7 && strcmp(argv[1], "client") == 0)
        return run_client(atoi(argv[2]), atoi(argv[3]), atof(argv[4]), atof(argv[5]), argv[6]);
    fprintf(stderr,
            "usage: %s upstream PORT CHUNKS INTERVAL_MS\n"
            "       %s client PORT STREAMS RAMP_S STALL_MS REQUEST_FILE\n",
            argv[0], argv[0]);
    return 2;
}
