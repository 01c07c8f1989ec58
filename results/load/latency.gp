set terminal pngcairo size 900,480 font 'sans,10'
set output 'results/load/latency.png'
set title 'call latency per format (p50 solid, p99 light)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set logscale y
set ylabel 'microseconds'
set key outside right
plot 'results/load/latency.dat' using 2:xtic(1) title 'lookup p50' lc rgb '#4477aa', '' using 3 title 'lookup p99' lc rgb '#a6c4e4', '' using 4 title 'get p50' lc rgb '#228833', '' using 5 title 'get p99' lc rgb '#a6dba0', '' using 6 title 'put p50' lc rgb '#cc6677', '' using 7 title 'put p99' lc rgb '#f2b8c6'
