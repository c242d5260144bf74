/* registry-forward PORT SOCKET: inside a task's container, which has no
 * network, listen on 127.0.0.1:PORT and relay each connection to the Unix
 * socket SOCKET, where ClawLoop's registry proxy (registry_proxy.py)
 * answers. Built static by the harness, so it runs in any image. Prints its
 * pid once listening, then runs in the background; a relay ends when both
 * sides have closed. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int write_all(int fd, const char *buf, ssize_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, (size_t)n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += w;
        n -= w;
    }
    return 0;
}

static void relay(int a, int b) {
    char buf[65536];
    int open_a = 1, open_b = 1;
    while (open_a || open_b) {
        struct pollfd fds[2] = {{a, open_a ? POLLIN : 0, 0}, {b, open_b ? POLLIN : 0, 0}};
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        for (int i = 0; i < 2; i++) {
            int from = i == 0 ? a : b, to = i == 0 ? b : a;
            int *open = i == 0 ? &open_a : &open_b;
            if (!*open || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = read(from, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                *open = 0;
                shutdown(to, SHUT_WR);
                continue;
            }
            if (write_all(to, buf, n) < 0) return;
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: registry-forward PORT SOCKET\n");
        return 2;
    }
    struct sockaddr_un target = {.sun_family = AF_UNIX};
    if (strlen(argv[2]) >= sizeof target.sun_path) {
        fprintf(stderr, "registry-forward: socket path too long\n");
        return 2;
    }
    strcpy(target.sun_path, argv[2]);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[1]))};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (listener < 0 || bind(listener, (struct sockaddr *)&address, sizeof address) < 0 || listen(listener, 64) < 0) {
        perror("registry-forward: listen");
        return 1;
    }
    pid_t daemon = fork();
    if (daemon < 0) {
        perror("registry-forward: fork");
        return 1;
    }
    if (daemon > 0) {
        printf("%d\n", (int)daemon);
        return 0;
    }
    setsid();
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    signal(SIGCHLD, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        int client = accept(listener, NULL, NULL);
        if (client < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return 1;
        }
        if (fork() == 0) {
            close(listener);
            int upstream = socket(AF_UNIX, SOCK_STREAM, 0);
            if (upstream >= 0 && connect(upstream, (struct sockaddr *)&target, sizeof target) == 0) relay(client, upstream);
            _exit(0);
        }
        close(client);
    }
}
