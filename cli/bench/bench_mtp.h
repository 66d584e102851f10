/* kazeia bench --mtp (bench_mtp.c) */
#ifndef KZ_BENCH_MTP_H
#define KZ_BENCH_MTP_H
int cmd_bench_mtp(int argc, char **argv);
#endif
